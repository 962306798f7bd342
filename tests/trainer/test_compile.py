"""torch.compile in the harness, on CPU with gloo (`--ddp.compile on`; CUDA's default, docs/trainer.md): a compiled
run trains as the eager one does for each workload at world 2 with two micro-batches a step (so the no_sync forward
runs compiled too), its compile is said apart from the throughput, a resize from 2 ranks to 1 resumes where the eager
run's does and compiles again (counted), and torchft replica groups train compiled when asked. Inductor keeps its
kernels on disk, so only the first run of a shape pays the C++ build."""

import re

import pytest
from launch import PROGRESS, RESUMED, run, standalone_cmd
from support.ports import free_port
from torchft_launch import group_env, start_group, start_lighthouse

from ddp_trainer.progress_log import COMPILED

STEPS = 50
# Loss lines have 4 decimals; inductor's fused kernels sum in another order, which moves the 4th at most.
TOLERANCE = 2e-3


def trainer(nproc: int, compile_mode: str, *extra: str) -> str:
    done = run(standalone_cmd(nproc, "--train.grad-accum-steps", "2", "--log.every-steps", "10",
                              "--metrics.port", "0", "--ddp.compile", compile_mode, *extra), timeout=420)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    return log


def losses(log: str) -> dict[int, float]:
    return {int(m["step"]): float(m["loss"]) for m in PROGRESS.finditer(log) if m["rank"] == "0"}


def assert_same_curve(compiled: dict[int, float], eager: dict[int, float]) -> None:
    assert compiled.keys() == eager.keys() and eager
    far = {s: (compiled[s], eager[s]) for s in eager if abs(compiled[s] - eager[s]) > TOLERANCE}
    assert not far, f"compiled vs eager loss beyond {TOLERANCE} at steps {far}"


@pytest.mark.parametrize("workload", ["digits", "cnn", "gpt"])
def test_a_compiled_run_trains_as_the_eager_one(workload):
    args = ("--workload", workload, "--train.steps", str(STEPS))
    eager = trainer(2, "off", *args)
    compiled = trainer(2, "on", *args)
    assert_same_curve(losses(compiled), losses(eager))
    assert len(losses(eager)) == STEPS // 10
    # The compile is said once per rank's process, at the first step, and never in an eager run.
    said = [m for m in COMPILED.finditer(compiled) if m["rank"] == "0"]
    assert [m["step"] for m in said] == ["1"] and int(said[0]["graphs"]) >= 1, compiled[-3000:]
    assert not COMPILED.search(eager)


def test_static_graph_compiled_trains_as_eager():
    """DDP's static_graph records the graph at the first backward, which runs synced (trainer._forward_backward);
    compiled, the no_sync micro-batches after it follow the same curve."""
    args = ("--workload", "digits", "--train.steps", "30", "--ddp.static-graph", "true")
    assert_same_curve(losses(trainer(2, "on", *args)), losses(trainer(2, "off", *args)))


def test_a_resize_from_two_ranks_to_one_resumes_compiled_as_eager(tmp_path):
    """A fixed global batch: at world 1 the gradient and the LR are those of world 2, so the resumed curve is the
    eager one's; the new process compiles its own graph (its micro-batches are twice as large) and says so."""
    curves = {}
    for mode in ("off", "on"):
        ck = tmp_path / mode
        common = ("--workload", "digits", "--train.global-batch-size", "64", "--train.decay", "constant",
                  "--checkpoint.dir", str(ck))
        trainer(2, mode, *common, "--train.steps", "30")
        resumed = trainer(1, mode, *common, "--train.steps", "50")
        assert (m := RESUMED.search(resumed)) and (m["step"], m["was"]) == ("30", "2"), resumed[-3000:]
        curves[mode] = losses(resumed)
        if mode == "on":
            said = [m["step"] for m in COMPILED.finditer(resumed)]
            assert said == ["31"], resumed[-3000:]  # counted in the attempt that resumed
    assert_same_curve(curves["on"], curves["off"])
    assert sorted(curves["on"]) == [40, 50]


def test_torchft_replica_groups_train_compiled_when_asked(tmp_path):
    port = free_port()
    lighthouse = start_lighthouse(port, 1000, tmp_path / "lighthouse.log")
    try:
        args = ("--workload", "digits", "--train.steps", "40", "--train.global-batch-size", "64",
                "--metrics.port", "0", "--log.every-steps", "10", "--ddp.compile", "on")
        groups = [start_group(group_env(port, g, 2, "compiled"), tmp_path / f"group-{g}.log", *args)
                  for g in range(2)]
        codes = [g.wait(timeout=300) for g in groups]
    finally:
        lighthouse.kill()
    logs = [(tmp_path / f"group-{g}.log").read_text() for g in range(2)]
    assert codes == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    for log in logs:
        assert re.search(r"group=\d rank=0\] compiled step=\d+ ", log), log[-3000:]
        curve = losses(log)
        assert sorted(curve) == [10, 20, 30, 40] and curve[40] < curve[10]
