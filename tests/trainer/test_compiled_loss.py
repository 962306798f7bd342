"""The compiled step takes the per-sample loss inside its graph (ddp_model.WithLoss). It compiled `model(x)` and ran
the loss after it eagerly, outside the graph (gpt's in 4,096-token chunks under activation checkpointing), so
inductor never fused the upcast, softmax and loss with the head. At one rank DDP's graph splitting is off: nothing to
overlap. (Whole compiled runs against eager ones, 1 and 2 ranks: test_compile.py.)"""

from __future__ import annotations

import functools

import pytest
import torch
import torch._dynamo
from test_dcp_checkpoints import one_rank_group  # noqa: F401  (the fixture)

from ddp_trainer.config import parse_config
from ddp_trainer.distributed_env import DistEnv
from ddp_trainer.progress_log import Identity
from ddp_trainer.trainer import Trainer
from ddp_trainer.workloads.gpt import GPT, sequence_losses

ONE_RANK = DistEnv(rank=0, world_size=1, local_rank=0, local_world_size=1, restart_count=0)


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    optimize_ddp = torch._dynamo.config.optimize_ddp
    yield
    torch._dynamo.config.optimize_ddp = optimize_ddp
    torch._dynamo.reset()


def record_graphs(monkeypatch) -> list[torch.fx.GraphModule]:
    """torch.compile with a backend that keeps each graph dynamo hands it and runs it as traced."""
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example_inputs):
        graphs.append(gm)
        return gm.forward

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=backend))
    return graphs


def output_shapes(gm: torch.fx.GraphModule) -> list[tuple[int, ...]]:
    (output,) = gm.graph.find_nodes(op="output")
    values = output.args[0] if isinstance(output.args[0], (tuple, list)) else (output.args[0],)
    return [tuple(v.meta["example_value"].shape) for v in values if hasattr(v, "meta")]


def test_the_compiled_step_is_one_graph_whose_outputs_are_the_per_sample_losses(
    tmp_path, one_rank_group, monkeypatch, fresh_dynamo  # noqa: F811
):
    graphs = record_graphs(monkeypatch)
    cfg = parse_config(["--workload", "gpt", "--train.steps", "1", "--metrics.port", "0", "--ddp.compile", "on",
                        "--train.global-batch-size", "4"], {})
    trainer = Trainer(cfg, ONE_RANK, torch.device("cpu"), Identity("compiled", "0", 0))
    x, y = trainer._next_batch(iter(trainer.data_loader()))
    total = trainer._forward_backward(x, y)
    assert len(graphs) == 1, f"{len(graphs)} graphs: the loss ran apart from the model"
    assert output_shapes(graphs[0]) == [(4,)], output_shapes(graphs[0])  # one loss per sample, not the logits
    eager = sequence_losses(trainer.net(x), y).detach().sum()
    torch.testing.assert_close(total, eager, rtol=1e-5, atol=1e-5)
    assert torch._dynamo.config.optimize_ddp is False, "one rank: no bucket splits"
    assert all(p.grad is not None for p in trainer.net.parameters())
    assert "model.token.weight" not in trainer.net.state_dict(), "checkpoints keep the model's own entry names"


def test_dynamo_traces_model_and_loss_without_a_graph_break(fresh_dynamo):
    from ddp_trainer.ddp_model import WithLoss
    from ddp_trainer.workloads.gpt import plain_sequence_losses

    torch.manual_seed(0)
    step = WithLoss(GPT(layers=2, width=32, heads=4, seq_len=16, vocab_size=64), plain_sequence_losses)
    x, y = torch.randint(0, 64, (3, 16)), torch.randint(0, 64, (3, 16))
    explained = torch._dynamo.explain(step)(x, y)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


def test_the_inductor_compiled_gpt_loss_and_gradients_equal_the_eager_chunked_ones(fresh_dynamo):
    from ddp_trainer.ddp_model import WithLoss
    from ddp_trainer.workloads.gpt import plain_sequence_losses

    torch.manual_seed(0)
    model = GPT(layers=2, width=32, heads=4, seq_len=16, vocab_size=64)
    x, y = torch.randint(0, 64, (3, 16)), torch.randint(0, 64, (3, 16))
    eager = sequence_losses(model(x), y, chunk_tokens=10)  # pieces under checkpoint, as eager trains
    eager.sum().backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)

    compiled = torch.compile(WithLoss(model, plain_sequence_losses))(x, y)
    compiled.sum().backward()
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)
    for got, want in zip((p.grad for p in model.parameters()), eager_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-5)


def failing_compiler(monkeypatch) -> None:
    def backend(gm, example_inputs):
        raise RuntimeError("no C++ compiler found")  # what a broken toolchain or an inductor bug ends in

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=backend))


@pytest.mark.parametrize("mode", ["auto", "on"])
def test_a_failing_compile_falls_back_to_eager_under_auto_and_stops_the_run_when_asked_for(
    tmp_path, one_rank_group, monkeypatch, fresh_dynamo, capsys, mode  # noqa: F811
):
    from ddp_trainer import trainer as trainer_module

    failing_compiler(monkeypatch)
    monkeypatch.setattr(trainer_module, "use_compile", lambda *args, **kwargs: (True, None))  # as on CUDA
    cfg = parse_config(["--workload", "digits", "--train.steps", "1", "--metrics.port", "0", "--ddp.compile", mode,
                        "--train.global-batch-size", "8"], {})
    trainer = Trainer(cfg, ONE_RANK, torch.device("cpu"), Identity("fallback", "0", 0))
    x, y = trainer._next_batch(iter(trainer.data_loader()))
    if mode == "on":
        with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="no C\\+\\+ compiler found"):
            trainer._forward_backward(x, y)
        return
    total = trainer._forward_backward(x, y)
    warnings = capsys.readouterr().err
    assert "compile auto: torch.compile failed (BackendCompilerFailed: " in warnings, warnings
    assert "no C++ compiler found" in warnings and "training eagerly" in warnings
    assert trainer.compiled is False and trainer.model is trainer.ddp
    eager = trainer.workload.sample_losses(trainer.net(x), y).detach().sum()
    torch.testing.assert_close(total, eager)
    assert all(p.grad is not None for p in trainer.net.parameters())
