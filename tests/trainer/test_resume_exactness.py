"""A resumed run is the run that was never stopped: every rank continues its own RNG stream (dropout differs per
rank here, so a reseeded rank 1 would change the loss), a longer --train.steps continues the cosine from where it
was, a checkpoint of another data set is refused, and the user entrypoint's atexit handlers run at the end."""

import json
import textwrap

import pytest
import torch

from ddp_trainer import exit_codes
from launch import PROGRESS, RESUMED, run, standalone_cmd, trainer_env

SCRIPT = textwrap.dedent('''
    import atexit, os
    import torch
    import torch.nn.functional as F
    from ddp_trainer.workloads import IndexableTensors, Workload

    def build_workload(cfg):
        # A logger's flush, as a user's code registers it: one line per process that ran it.
        atexit.register(lambda: open(os.environ["ATEXIT_FILE"], "a").write(os.environ["RANK"] + "\\n"))
        g = torch.Generator().manual_seed(0)
        x = torch.randn(cfg.model.train_samples or 96, 6, generator=g)
        y = (x[:, 0] > x[:, 1]).long() + (x[:, 2] > 0.5).long()
        model = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.Tanh(), torch.nn.Dropout(0.5),
                                    torch.nn.Linear(32, 3))
        return Workload(name="dropout-mlp", model=model, train_set=IndexableTensors(x, y),
                        sample_losses=lambda out, t: F.cross_entropy(out, t, reduction="none"))
''')


def cmd(tmp, nproc: int, steps: int, ck: str, *extra: str) -> list[str]:
    return standalone_cmd(nproc, "--entrypoint", str(tmp / "train.py"), "--train.steps", str(steps),
                          "--train.global-batch-size", "12", "--train.optimizer", "sgd", "--train.lr", "0.1",
                          "--metrics.port", "0", "--checkpoint.dir", str(tmp / ck), "--log.every-steps", "1", *extra)


def launch(tmp, *args, **env):
    done = run(cmd(tmp, *args), env=trainer_env(ATEXIT_FILE=str(tmp / "atexit"), **env))
    return done, done.stdout + done.stderr


@pytest.fixture
def tmp(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    return tmp_path


def losses(stdout: str) -> dict[int, float]:
    return {int(m["step"]): float(m["loss"]) for m in PROGRESS.finditer(stdout)}


def test_every_rank_continues_its_own_rng_stream(tmp):
    constant = ("--train.decay", "constant")
    reference, log = launch(tmp, 2, 16, "reference", *constant)
    assert reference.returncode == 0, log[-3000:]
    first, log = launch(tmp, 2, 8, "resumed", *constant)
    assert first.returncode == 0, log[-3000:]
    state = torch.load(tmp / "resumed" / "step-000000008.pt", weights_only=True)
    streams = [rank["torch"] for rank in state["rng_per_rank"]]
    assert len(streams) == 2 and not torch.equal(*streams), "each rank's own state, not rank 0's twice"
    second, log = launch(tmp, 2, 16, "resumed", *constant)
    assert second.returncode == 0, log[-3000:]
    assert RESUMED.search(second.stdout)["step"] == "8"
    after, want = losses(second.stdout), losses(reference.stdout)
    assert sorted(after) == list(range(9, 17))
    for step in after:  # the same dropout masks on both ranks: equal up to float summation order
        assert after[step] == pytest.approx(want[step], abs=2e-4), (step, after, want)
    got = torch.load(tmp / "resumed" / "step-000000016.pt", weights_only=True)["model"]
    for name, value in torch.load(tmp / "reference" / "step-000000016.pt", weights_only=True)["model"].items():
        torch.testing.assert_close(got[name], value, rtol=1e-5, atol=1e-6)
    # The atexit handler of the user's script ran in every process of all three runs.
    assert sorted((tmp / "atexit").read_text().split()) == ["0", "0", "0", "1", "1", "1"]


def test_a_longer_run_continues_the_cosine_and_another_data_set_is_refused(tmp):
    first, log = launch(tmp, 1, 6, "ck")
    assert first.returncode == 0, log[-3000:]
    assert losses(first.stdout) and (tmp / "atexit").read_text() == "0\n"
    longer, log = launch(tmp, 1, 12, "ck")
    assert longer.returncode == 0, log[-3000:]
    # The first run ended at the cosine's floor (0.1 x 0.1); the longer one goes on from there rather than jump
    # back to the value that step 7 of 12 has on a fresh schedule (0.037).
    assert [m["lr"] for m in PROGRESS.finditer(longer.stdout)] == ["1.0e-02"] * 6
    schedule = torch.load(tmp / "ck" / "step-000000012.pt", weights_only=True)["scheduler"]
    assert (schedule["total_steps"], schedule["anchor_step"], schedule["anchor_progress"]) == (12, 6, 1.0)

    error_file = tmp / "termination-log"
    refused, log = launch(tmp, 1, 20, "ck", "--model.train-samples", "80", TORCHELASTIC_ERROR_FILE=str(error_file))
    assert refused.returncode != 0 and "step=13" not in refused.stdout, log[-3000:]
    want = ("refusing to resume from " + str(tmp / "ck" / "step-000000012.pt") + ", written by a run of another "
            "shape: training set length 96 there, 80 here (the data set, e.g. --model.train-samples)")
    assert want in log
    root = json.loads(error_file.read_text())["message"]
    assert root["errorCode"] == exit_codes.CHECKPOINT_MISMATCH and "CheckpointMismatch: " + want in root["message"]


def test_a_checkpoint_by_time_is_written_by_every_rank_together(tmp):
    """Rank 0's clock asks through the step vote, so both ranks give their RNG state at the same step."""
    done, log = launch(tmp, 2, 300, "timed", "--checkpoint.every-seconds", "0.05", "--checkpoint.keep", "4")
    assert done.returncode == 0, log[-3000:]
    written = sorted((tmp / "timed").glob("step-*.pt"))
    assert len(written) >= 2 and written[-1].name == "step-000000300.pt", written
    for path in written:
        assert len(torch.load(path, weights_only=True)["rng_per_rank"]) == 2, path
