"""A rank that stops making progress (SIGSTOP, like a hung GPU or a stuck NCCL kernel): the finite collective
timeout the operator injects (DDPJOB_COLLECTIVE_TIMEOUT_SECONDS) fires on its peer, the group fails instead of
waiting forever, torchrun restarts it, and it resumes from the last checkpoint to finish."""

import os
import signal
import time

from launch import DONE, PROGRESS, RESUMED, start, standalone_cmd, stop, trainer_env, wait_for_line, worker_pids

STEPS = 100
TIMEOUT_SECONDS = 5


def test_stopped_rank_trips_the_collective_timeout_and_the_group_restarts(tmp_path):
    log = tmp_path / "torchrun.log"
    env = trainer_env(DDPJOB_COLLECTIVE_TIMEOUT_SECONDS=str(TIMEOUT_SECONDS))
    proc = start(standalone_cmd(2, "--workload", "digits", "--train.steps", str(STEPS), "--metrics.port", "0",
                                "--checkpoint.dir", str(tmp_path / "ck"), "--checkpoint.every-steps", "20",
                                "--log.every-steps", "10", max_restarts=1), env=env, log=log)
    try:
        # Step 40's line comes before its checkpoint (a gather of every rank's RNG state, then rank 0's write); at
        # step 50's it is written, so the stopped rank cannot leave step 20 the newest on a loaded machine.
        wait_for_line(log, PROGRESS, proc, where=lambda m: int(m["step"]) >= 50)
        victims = worker_pids(proc.pid)
        assert len(victims) == 2, victims
        os.kill(victims[1], signal.SIGSTOP)
        stopped_at = time.monotonic()
        resumed = wait_for_line(log, RESUMED, proc, timeout=180)
        detected_after = time.monotonic() - stopped_at
        assert proc.wait(timeout=180) == 0, log.read_text()[-4000:]
    finally:
        stop(proc)
    text = log.read_text()
    # The peer's collective gave up after the timeout rather than hanging (gloo names the timeout).
    # gloo words it by which side sees it first: "Timed out waiting ...", "... timed out", "Application timeout
    # caused pair closure".
    assert "timed out" in text.lower() or "timeout caused" in text.lower(), text[-4000:]
    # Bounded by the wait for the resumed line (180 s) rather than a wall-clock assertion a loaded machine breaks.
    print(f"hang turned into a restart after {detected_after:.1f}s")
    assert int(resumed["step"]) >= 40 and int(resumed["step"]) % 20 == 0
    done = DONE.search(text)
    assert done and int(done["step"]) == STEPS and done["attempt"] == "1", text[-3000:]
