"""A resize at a fixed global batch changes nothing the optimizer sees: 2 ranks, then 1, then 2 again (each resumed
from the last one's checkpoint) keep the LR and the per-rank micro-batch, accumulate twice at size 1, and follow
the loss curve and weights of one process stepping on the union batch.

The model has no BatchNorm or dropout, so a step's result depends on the batch alone and not on how it is split;
SGD with momentum, so the optimizer's state must carry over too."""

import textwrap

import pytest
import torch

from ddp_trainer.progress_log import SIZED
from launch import PROGRESS, run, standalone_cmd

GLOBAL_BATCH = 12
LR = 0.05
SCRIPT = textwrap.dedent('''
    import torch
    import torch.nn.functional as F
    from ddp_trainer.workloads import IndexableTensors, Workload

    def build_workload(cfg):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(96, 6, generator=g)
        y = (x[:, 0] > x[:, 1]).long() + (x[:, 2] > 0.5).long()
        model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
        return Workload(name="mlp3", model=model, train_set=IndexableTensors(x, y),
                        sample_losses=lambda out, t: F.cross_entropy(out, t, reduction="none"))
''')


def cmd(nproc: int, steps: int, script, ck) -> list[str]:
    return standalone_cmd(nproc, "--entrypoint", str(script), "--train.steps", str(steps), "--train.global-batch-size",
                          str(GLOBAL_BATCH), "--train.optimizer", "sgd", "--train.lr", str(LR), "--train.decay",
                          "constant", "--metrics.port", "0", "--checkpoint.dir", str(ck), "--log.every-steps", "1")


def trained(nproc: int, steps: int, script, ck) -> tuple[tuple[str, ...], dict[int, tuple[float, str]]]:
    """(the sized line's world, rank batch, micro-batch, accumulation, peak LR; {step: (loss, lr)})."""
    done = run(cmd(nproc, steps, script, ck))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    sized = SIZED.search(done.stdout)
    assert sized, done.stdout[-2000:]
    progress = {int(m["step"]): (float(m["loss"]), m["lr"]) for m in PROGRESS.finditer(done.stdout)}
    return (sized["world"], sized["rank_batch"], sized["micro_batch"], sized["accum"], sized["lr"]), progress


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lr_resize")
    script = tmp / "mlp3.py"
    script.write_text(SCRIPT)
    resized, one = tmp / "resized", tmp / "one"
    return {
        "resized": [trained(2, 6, script, resized), trained(1, 12, script, resized), trained(2, 18, script, resized)],
        "one": trained(1, 18, script, one),
        "weights": [torch.load(d / "step-000000018.pt", weights_only=True)["model"] for d in (resized, one)],
    }


def test_lr_and_micro_batch_across_a_resize_at_a_fixed_global_batch(runs):
    sizes = [sized for sized, _ in runs["resized"]]
    peak = f"{LR:.3e}"
    assert sizes == [("2", "6", "6", "1", peak), ("1", "12", "6", "2", peak), ("2", "6", "6", "1", peak)], \
        "the LR stays; at size 1 the share doubles and is run as two micro-batches of the size that fit at 2"
    lrs = {lr for _, progress in runs["resized"] for _, lr in progress.values()}
    assert lrs == {f"{LR:.1e}"}


def test_the_union_batch_in_one_process_is_the_reference(runs):
    sized, _ = runs["one"]
    assert sized == ("1", "12", "12", "1", f"{LR:.3e}")  # a fresh start at 1 has no limit to keep


def test_the_loss_curve_matches_one_process_on_the_union_batch(runs):
    resized = {step: loss for _, progress in runs["resized"] for step, (loss, _) in progress.items()}
    reference = {step: loss for step, (loss, _) in runs["one"][1].items()}
    assert sorted(resized) == sorted(reference) == list(range(1, 19))
    assert reference[18] < reference[1] - 0.1, "training moved, so agreement below means something"
    for step in reference:
        assert resized[step] == pytest.approx(reference[step], abs=2e-4), step  # printed to 4 decimals
    got, want = runs["weights"]
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-6)
