"""The seeds' math, through the harness's own step (Trainer on a real 2-rank gloo group):
one DDP step == one single-process step on the union batch, with unequal shares (B=7 over 2 ranks), and
no_sync accumulation over k micro-batches == one large batch, with one all-reduce per step."""

import pytest
import torch
import torch.multiprocessing as mp

import ddp_math_worker as w
from support.ports import free_port

SCENARIOS = [("union_b7", 7, 1, []), ("accum_b12_k3", 12, 3, []), ("accum_b10_k2", 10, 2, []),
             ("static_graph_accum_b12_k3", 12, 3, ["--ddp.static-graph", "true"]),
             ("bf16_hook_b8", 8, 1, ["--ddp.comm-hook", "bf16"])]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp_math")
    mp.spawn(w.run_scenarios, args=(2, free_port(), str(out), SCENARIOS), nprocs=2, join=True)
    return {name: torch.load(out / f"{name}.pt") for name, *_ in SCENARIOS}


def single_process_step(global_batch: int) -> list[torch.Tensor]:
    torch.manual_seed(w.SEED)
    model = w.model()
    x, y = w.data()
    w.sample_losses(model(x[:global_batch]), y[:global_batch]).mean().backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.5 * p.grad
    return [p.detach() for p in model.parameters()]


def initial_params() -> list[torch.Tensor]:
    torch.manual_seed(w.SEED)
    return [p.detach() for p in w.model().parameters()]


@pytest.mark.parametrize("name, global_batch", [("union_b7", 7), ("accum_b12_k3", 12), ("accum_b10_k2", 10),
                                                ("static_graph_accum_b12_k3", 12)])
def test_ddp_step_equals_single_process_step_on_the_union_batch(results, name, global_batch):
    got, want = results[name]["params"], single_process_step(global_batch)
    moved = max((a - b).abs().max().item() for a, b in zip(want, initial_params()))
    assert moved > 1e-3  # the step really changed the weights, so equality below means something
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_different_batch_would_not_match(results):
    """Guards the comparison itself: the 7-sample result differs from a step on the first 6 samples."""
    got, other = results["union_b7"]["params"], single_process_step(6)
    assert max((a - b).abs().max().item() for a, b in zip(got, other)) > 1e-4


def test_accumulation_all_reduces_once_per_step(results):
    """no_sync around the first k-1 micro-batches: a tiny model is one bucket, so one all-reduce per step,
    not k (the values alone could not tell, since averaging is linear)."""
    assert results["accum_b12_k3"]["allreduce_calls"] == 1
    assert results["union_b7"]["allreduce_calls"] == 1


def test_bf16_gradient_compression_stays_close(results):
    """The bf16 comm hook rounds the all-reduced gradients to 8 bits of mantissa: close, not equal."""
    got, want = results["bf16_hook_b8"]["params"], single_process_step(8)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=5e-3)
