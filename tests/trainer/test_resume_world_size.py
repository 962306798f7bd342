"""Resume at a different world size with a per-rank batch: the global step and sample count carry on, the data
position is the one the global batches reached, and the LR follows the global batch, which halved with the world
(the fixed-batch case, where it must not move, is test_lr_resize.py)."""

import torch

from ddp_trainer.batching import SamplePosition
from ddp_trainer.workloads.digits import load_digits_arrays, split_and_scale
from launch import PROGRESS, RESUMED, run, standalone_cmd

BASE_LR = 0.001


def cmd(nproc: int, steps: int, ck) -> list[str]:
    return standalone_cmd(nproc, "--workload", "digits", "--train.steps", str(steps), "--train.lr", str(BASE_LR),
                          "--train.decay", "constant", "--train.batch-size-per-rank", "32", "--metrics.port", "0",
                          "--checkpoint.dir", str(ck), "--log.every-steps", "10")


def test_two_ranks_then_one(tmp_path):
    ck = tmp_path / "ck"
    first = run(cmd(2, 30, ck))
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    # B = 2 x 32: twice --train.lr's reference batch (one rank's 32); AdamW's rule is the square root
    assert [m["lr"] for m in PROGRESS.finditer(first.stdout)] == ["1.4e-03"] * 3

    second = run(cmd(1, 40, ck))
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    resumed = RESUMED.search(second.stdout)
    assert resumed and (resumed["step"], resumed["samples"], resumed["was"]) == ("30", str(30 * 64), "2")
    progress = list(PROGRESS.finditer(second.stdout))
    assert [(m["step"], m["lr"]) for m in progress] == [("40", "1.0e-03")]  # B = 32, the reference batch

    final = torch.load(ck / "step-000000040.pt", weights_only=True)
    assert final["step"] == 40 and final["world_size"] == 1
    assert final["samples"] == 30 * 64 + 10 * 32
    (train_x, _), _ = split_and_scale(*load_digits_arrays())
    want = SamplePosition()
    for batch in [64] * 30 + [32] * 10:
        want = want.after_batch(batch, len(train_x))
    assert (final["epoch"], final["offset"]) == (want.epoch, want.offset)
    assert int(progress[0]["epoch"]) == want.epoch
