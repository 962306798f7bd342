"""torchft replica groups, end to end on CPU: a real Lighthouse and two replica groups (a standalone torchrun each,
as two pods run them). kill -9 of group 1's worker mid-run; group 0 keeps stepping alone once the Lighthouse's
heartbeat timeout has passed; a restarted group 1 heals from group 0 live (no checkpoint read) and both end at the
last step with exit 0.

This is also the guard for torchft 0.2.0's comm-hook bug: there, the healthy group died with the killed one (an
`assert fut._fut` in its DDP comm hook when the all-reduce failed). The survivor here must go on stepping and
finish (trainer_image/pyproject.toml pins the nightly that fixed it)."""

import os
import signal
import time

from launch import DONE, PROGRESS, RESUMED, stop, wait_for_line, worker_pids
from support.ports import free_port
from torchft_launch import group_env, scrape, scraped_step, start_group, start_lighthouse

from ddp_trainer.progress_log import HEALED

# The survivor must still be training when the replacement group has joined: it is held back while the
# replacement's torchrun starts (see the test), and after that the replacement's worker joins within a second idle.
# Idle here the survivor steps about 300 times a second alone (a group's half of the global batch) and about 120
# after the heal (both groups' pace); held back, the replacement healed at its step 1,142 (1,848 in another run).
STEPS = 8000
KILL_AT = 60  # group 1's worker dies once group 0 has logged this step
ALONE_STEPS = 30  # group 0 must pass the step it had at the kill by this many while group 1 is dead
HEARTBEAT_TIMEOUT_MS = 1000
# How the survivor is held back: stopped, but running HOLD_RUN_S in every HOLD_PERIOD_S (its heartbeat, every
# 100 ms while it runs, stays well inside HEARTBEAT_TIMEOUT_MS).
HOLD_PERIOD_S, HOLD_RUN_S = 0.3, 0.05


def trainer_args(tmp_path, port: int) -> list[str]:
    return [
        "--workload",
        "digits",
        "--train.steps",
        str(STEPS),
        "--train.global-batch-size",
        "64",
        "--train.decay",
        "constant",
        "--metrics.port",
        str(port),
        "--log.every-steps",
        "10",
        "--checkpoint.dir",
        str(tmp_path / "ck"),
        "--checkpoint.every-steps",
        "100",
    ]


def poll_step(port: int, proc, above: float, deadline_s: float, group: int = 0) -> float:
    """group's scraped step once it exceeds `above`; fails if its process exits first or the deadline passes."""
    deadline, seen = time.monotonic() + deadline_s, None
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the surviving group exited with {proc.returncode} (the 0.2.0 comm-hook bug?)"
        seen = scraped_step(port, group)
        if seen is not None and seen > above:
            return seen
        time.sleep(0.1)
    raise AssertionError(f"group 0's step stayed at {seen}, not above {above}, for {deadline_s} s")


def hold_back_until_worker_starts(survivor, agent, log, timeout: float, old: tuple[int, ...] = ()) -> list[int]:
    """`survivor` (a torchrun's session) stopped but for HOLD_RUN_S in every HOLD_PERIOD_S until torchrun `agent`
    has a worker other than `old` (a restart in place), then running on; its new workers' pids. Fails if the agent
    exits first or starts no worker in time."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            assert agent.poll() is None, f"the replacement exited with {agent.returncode}:\n{log.read_text()[-3000:]}"
            started = [pid for pid in worker_pids(agent.pid) if pid not in old]
            if started:
                return started
            os.killpg(survivor.pid, signal.SIGSTOP)
            time.sleep(HOLD_PERIOD_S - HOLD_RUN_S)
            os.killpg(survivor.pid, signal.SIGCONT)
            time.sleep(HOLD_RUN_S)
        raise AssertionError(f"the replacement's torchrun started no worker in {timeout} s:\n{log.read_text()[-3000:]}")
    finally:
        os.killpg(survivor.pid, signal.SIGCONT)


def test_survivor_goes_on_and_a_replacement_heals_live(tmp_path):
    lighthouse_port, ports = free_port(), (free_port(), free_port())
    lighthouse = start_lighthouse(lighthouse_port, HEARTBEAT_TIMEOUT_MS, tmp_path / "lighthouse.log")
    logs = [tmp_path / "group0.log", tmp_path / "group1.log", tmp_path / "group1-again.log"]
    envs = [group_env(lighthouse_port, g, 2, "ft-test") for g in (0, 1)]
    groups = [start_group(envs[g], logs[g], *trainer_args(tmp_path, ports[g])) for g in (0, 1)]
    again = None
    try:
        wait_for_line(logs[0], PROGRESS, groups[0], timeout=90, where=lambda m: int(m["step"]) >= KILL_AT)
        wait_for_line(logs[1], PROGRESS, groups[1], timeout=30, where=lambda m: int(m["step"]) >= KILL_AT)
        victims = worker_pids(groups[1].pid)
        assert len(victims) == 1, victims
        os.kill(victims[0], signal.SIGKILL)
        at_kill = scrape(ports[0])
        killed_at = at_kill["ddp_trainer_step"]
        # Whichever group formed the first quorum alone, the other healed from it at start: that heal is not this one.
        survivor_heals = at_kill["ddp_trainer_heals_total"]
        assert groups[1].wait(timeout=30) != 0  # torchrun without restarts gives up: the pod would be replaced

        # (a) the survivor steps on, read from its own endpoint, while group 1 is dead
        alone = poll_step(ports[0], groups[0], killed_at + ALONE_STEPS, deadline_s=60)
        assert groups[1].poll() is not None

        # (b) a replacement group 1 heals from group 0, live, at a step past the kill. While the replacement's
        # torchrun starts (Python, torch's import in its agent and fork server) the survivor is held back, or on a
        # busy machine it can run out its steps first (CI, stop 50). Held back, not stopped: it runs a moment in
        # every HOLD_PERIOD_S, so its heartbeat at the Lighthouse never lapses, and the quorum the replacement's
        # worker asks for sees both groups, as it would with a slower survivor.
        again = start_group(envs[1], logs[2], *trainer_args(tmp_path, ports[1]))
        hold_back_until_worker_starts(groups[0], again, logs[2], timeout=180)
        try:
            healed = wait_for_line(logs[2], HEALED, again, timeout=120)
        except AssertionError:
            assert groups[0].poll() is None, (
                f"the survivor ran out its {STEPS} steps before the replacement joined; the replacement's log:\n"
                f"{logs[2].read_text()[-3000:]}\nthe survivor's:\n{logs[0].read_text()[-2000:]}"
            )
            raise
        assert healed["peer"] == "0" and healed["group"] == "1"
        assert int(healed["step"]) > alone, (healed["step"], alone)
        metrics = scrape(ports[1], 1)
        assert metrics["ddp_trainer_heals_total"] >= 1
        assert metrics["ddp_trainer_checkpoint_load_seconds"] == 0
        assert metrics["ddp_trainer_replica_groups"] == 2  # the quorum it healed in, and those after, have both
        poll_step(ports[1], again, int(healed["step"]) + 10, deadline_s=60, group=1)  # it trains on after the heal
        assert scrape(ports[0])["ddp_trainer_heals_total"] == survivor_heals  # the survivor took nothing

        # (c) both end at the last step
        assert groups[0].wait(timeout=600) == 0, logs[0].read_text()[-3000:]
        assert again.wait(timeout=120) == 0, logs[2].read_text()[-3000:]
    finally:
        for proc in (*groups, *([again] if again else []), lighthouse):
            stop(proc)
    first, second = logs[0].read_text(), logs[2].read_text()
    assert RESUMED.search(second) is None, "the replacement read a checkpoint instead of healing"
    assert [m for m in HEALED.finditer(first) if int(m["step"]) > killed_at] == []
    for text in (first, second):
        done = DONE.search(text)
        assert done and int(done["step"]) == STEPS, text[-2000:]
        assert f"step={STEPS}/{STEPS}" in text
