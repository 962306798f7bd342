"""SIGTERM writes a checkpoint and exits cleanly. (A truncated checkpoint skipped in favour of the previous one on the
next start: test_checkpoint_resume.py's damage table.)"""

import os
import re
import signal

import pytest

from launch import PROGRESS, start, standalone_cmd, stop, wait_for_line, worker_pids

PREEMPTED = re.compile(r"rank=0\] preempted \((?P<why>\w+)\): checkpoint written step=(?P<step>\d+), "
                       r"exiting with 143$", re.M)


def long_run(ck, steps=100000, nproc=2, *extra):
    return standalone_cmd(nproc, "--workload", "digits", "--train.steps", str(steps), "--metrics.port", "0",
                          "--checkpoint.dir", str(ck), "--checkpoint.every-steps", "20", "--log.every-steps", "10",
                          *extra)


@pytest.mark.parametrize("target", ["torchrun", "one_worker"])
def test_sigterm_writes_a_checkpoint_and_exits(tmp_path, target):
    """torchrun: the pod's PID 1 got it and signals every worker's process group, DataLoader workers included
    (hence --data.workers 1 here). one_worker: only rank 1 got it; the stop vote in the log-step all-reduce
    makes rank 0 stop at the same step and write the checkpoint."""
    ck, log = tmp_path / "ck", tmp_path / "run.log"
    proc = start(long_run(ck, 100000, 2, *(["--data.workers", "1"] if target == "torchrun" else [])), log=log)
    try:
        wait_for_line(log, PROGRESS, proc, where=lambda m: int(m["step"]) >= 30)
        os.kill(proc.pid if target == "torchrun" else worker_pids(proc.pid)[1], signal.SIGTERM)
        code = proc.wait(timeout=90)
    finally:
        stop(proc)
    text = log.read_text()
    preempted = PREEMPTED.search(text)
    assert preempted, text[-3000:]
    assert preempted["why"] == ("SIGTERM" if target == "torchrun" else "peer")
    step = int(preempted["step"])
    assert step >= 30 and (ck / f"step-{step:09d}.pt").is_file()
    assert "Traceback" not in text.split("preempted")[0]  # no worker crashed on the way to the checkpoint
    assert "exitcode  : 143" in text or code != 0
