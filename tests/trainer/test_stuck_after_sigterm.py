"""A rank in a collective with a peer that no longer answers never ends its step, so it never reaches the stop vote
that SIGTERM waits for: once signalled, such a step ends the process after STUCK_STEP_FACTOR x the longest recent
step (at least STUCK_MIN_SECONDS), not after torchrun's whole shutdown timeout (preemption.py). Found by the
recovery table (InPlace, a silent node): the survivor that did not watch the frozen node was stopped by its agent
for the membership change and held the group's re-form for the 30 s shutdown timeout."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time

import pytest
from launch import start, standalone_cmd, stop, trainer_env, wait_for_line, worker_pids

from ddp_trainer import exit_codes
from ddp_trainer.preemption import STUCK_MIN_SECONDS, PreemptionFlag


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def flag_after(steps: list[float], clock: Clock) -> PreemptionFlag:
    """A flag inside the training loop whose last steps took `steps` seconds each."""
    flag = PreemptionFlag(clock=clock)
    flag.loop_started()
    flag.step_ended()
    for seconds in steps:
        clock.now += seconds
        flag.step_ended()
    return flag


@pytest.mark.parametrize("name, steps, signalled, waited, saving, looping, want", [
    # The scenario first: 0.1 s steps, SIGTERM, and the step in progress has not ended 10 s later.
    ("a 0.1 s step not ended 10 s after SIGTERM", [0.1] * 5, True, 10.0, False, True, 10.0),
    ("not yet at 9 s", [0.1] * 5, True, 9.0, False, True, None),
    ("5 s steps: the limit is 15 s, not 10 s", [5.0] * 3, True, 12.0, False, True, None),
    ("5 s steps, 15 s", [5.0] * 3, True, 15.0, False, True, 15.0),
    ("no SIGTERM: a long step is only a long step", [0.1] * 5, False, 600.0, False, True, None),
    ("a checkpoint being written is never cut short", [0.1] * 5, True, 600.0, True, True, None),
    ("outside the training loop (start-up, the final evaluation)", [0.1] * 5, True, 600.0, False, False, None),
])
def test_a_step_that_does_not_end_after_sigterm_is_stuck(name, steps, signalled, waited, saving, looping, want):
    clock = Clock()
    flag = flag_after(steps, clock)
    if signalled:
        flag.signalled("SIGTERM")
    if not looping:
        flag.loop_ended()
    clock.now += waited
    with flag.writing_checkpoint() if saving else contextlib.nullcontext():
        got = flag.stuck_for()
    assert got == (None if want is None else pytest.approx(want)), name


def test_a_step_that_ends_after_the_signal_starts_the_wait_again():
    clock = Clock()
    flag = flag_after([0.1] * 5, clock)
    flag.signalled("SIGTERM")
    clock.now += 8
    flag.step_ended()  # slow, but it ended: the process is alive and the vote will stop it
    clock.now += 9
    assert flag.stuck_for() is None
    clock.now += 15  # the recent steps now hold the 8 s one: 24 s from that step's end
    assert flag.stuck_for() == pytest.approx(24)


def test_a_signalled_worker_stuck_with_a_frozen_peer_exits_without_waiting_for_the_collective_timeout(tmp_path):
    """Two real workers (torchrun, gloo, a 300 s collective timeout). Worker 1 is frozen (SIGSTOP: its sockets stay
    open, no reset), then worker 0 gets SIGTERM: it exits 143 with the line that says why, well before 300 s. Before
    preemption.py's watch it sat in the collective until the timeout, and under torchrun's stop until the kill."""
    log = tmp_path / "run.log"
    cmd = standalone_cmd(2, "--workload=digits", "--train.steps=100000", "--log.every-steps=10",
                         "--metrics.port=0")
    proc = start(cmd, env=trainer_env(DDPJOB_COLLECTIVE_TIMEOUT_SECONDS="300"), log=log)
    frozen = None
    try:
        wait_for_line(log, re.compile(r"step=(?P<step>\d+)/"), proc, timeout=180, where=lambda m: int(m["step"]) >= 30)
        workers = sorted(worker_pids(proc.pid))
        assert len(workers) == 2, workers
        rank0 = int(re.search(r"rank=0\] started pid=(?P<pid>\d+)", log.read_text())["pid"])  # rank 0 talks
        assert rank0 in workers, (rank0, workers)
        ranks = {0: rank0, 1: next(pid for pid in workers if pid != rank0)}
        frozen = ranks[1]
        os.kill(frozen, signal.SIGSTOP)
        time.sleep(1)  # worker 0 is now in a collective that worker 1 will never answer
        os.kill(ranks[0], signal.SIGTERM)
        line = wait_for_line(log, re.compile(r"SIGTERM and no step ended for (?P<s>\d+) s .*exiting (?P<code>\d+)"),
                             proc, timeout=120)
        assert int(line["code"]) == exit_codes.PREEMPTED
        assert int(line["s"]) >= STUCK_MIN_SECONDS
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _alive(ranks[0]):
            time.sleep(0.2)
        assert not _alive(ranks[0]), "worker 0 is still running"
    finally:
        if frozen is not None:
            try:
                os.kill(frozen, signal.SIGKILL)
            except ProcessLookupError:
                pass
        stop(proc)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.parametrize("phase", ["a quorum (torchft: waiting on the other groups, or healing from one)",
                                   "torch.compile compiling a graph"])
def test_a_step_that_waits_or_compiles_after_sigterm_is_not_stuck(phase):
    """Only a step that computes is timed: a quorum has its own timeout, and compiling (the first step, a guard that
    failed) takes minutes with no peer involved. The wait starts again where the phase ends."""
    clock = Clock()
    flag = flag_after([0.1] * 5, clock)
    flag.signalled("SIGTERM")
    with flag.not_computing():
        clock.now += 600
        assert flag.stuck_for() is None, phase
    clock.now += 9
    assert flag.stuck_for() is None, phase
    clock.now += 1
    assert flag.stuck_for() == pytest.approx(10), phase


def test_a_phase_that_ends_leaves_the_next_one_timed_when_nested():
    clock = Clock()
    flag = flag_after([0.1] * 5, clock)
    flag.signalled("SIGTERM")
    with flag.not_computing():
        with flag.not_computing():
            clock.now += 100
        clock.now += 100
        assert flag.stuck_for() is None
    clock.now += 10
    assert flag.stuck_for() == pytest.approx(10)


def test_dynamo_compiling_is_a_phase_the_watch_leaves_alone():
    """The flag learns of compiling from dynamo's own start and end callbacks: during a compile (here a backend that
    takes 600 s of the fake clock) nothing is stuck; after it, the step is timed again."""
    import torch

    clock = Clock()
    flag = flag_after([0.1] * 5, clock)
    flag.signalled("SIGTERM")
    seen: list[float | None] = []

    def slow_backend(gm, example_inputs):
        clock.now += 600
        seen.append(flag.stuck_for())
        return gm.forward

    torch._dynamo.reset()  # which also drops the callbacks registered before it
    remove = flag.watch_compiles()
    try:
        torch.compile(lambda x: x * 2 + 1, backend=slow_backend)(torch.ones(3))
    finally:
        remove()
    assert seen == [None]
    assert flag.stuck_for() is None
    clock.now += 10
    assert flag.stuck_for() == pytest.approx(10)
