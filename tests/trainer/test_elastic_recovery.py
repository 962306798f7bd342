"""Elastic recovery: SIGKILL one worker mid-training under --max-restarts; torchrun restarts the group, which
resumes from the newest checkpoint (not step 0) and ends at exactly the target step."""

import os
import signal

from launch import DONE, PROGRESS, RESUMED, start, standalone_cmd, stop, wait_for_line, worker_pids

STEPS = 300


def test_killed_worker_resumes_from_checkpoint(tmp_path):
    log = tmp_path / "torchrun.log"
    proc = start(standalone_cmd(2, "--workload", "digits", "--train.steps", str(STEPS), "--metrics.port", "0",
                                "--checkpoint.dir", str(tmp_path / "ck"), "--checkpoint.every-steps", "20",
                                "--log.every-steps", "10", max_restarts=1), log=log)
    try:
        # Rank 0 logs step 40 before it writes step 40's checkpoint; by its step-50 line that write is done (a save
        # blocks its step), so the kill cannot land in between on a loaded machine and leave step 20 the newest.
        wait_for_line(log, PROGRESS, proc, where=lambda m: int(m["step"]) >= 50)
        victims = worker_pids(proc.pid)
        assert len(victims) == 2, victims
        os.kill(victims[1], signal.SIGKILL)
        resumed = wait_for_line(log, RESUMED, proc)
        assert proc.wait(timeout=180) == 0, log.read_text()[-4000:]
    finally:
        stop(proc)
    text = log.read_text()
    resumed_at = int(resumed["step"])
    assert resumed_at >= 40 and resumed_at % 20 == 0, text[-3000:]
    assert int(resumed["samples"]) == resumed_at * 64 and resumed["was"] == "2"
    after = [m for m in PROGRESS.finditer(text) if m["attempt"] == "1"]  # TORCHELASTIC_RESTART_COUNT=1
    assert after and int(after[0]["step"]) == resumed_at + 10
    done = DONE.search(text)
    assert done and int(done["step"]) == STEPS and done["attempt"] == "1"
    assert f"step={STEPS}/{STEPS}" in text
