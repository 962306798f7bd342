"""How long a living torchrun agent's rendezvous heartbeat goes stale on a loaded machine: the margin behind
InPlace's keep-alive (operator: workers/rendezvous.IN_PLACE_KEEP_ALIVE).

torchrun's c10d rendezvous takes a participant for dead once its last heartbeat is older than keep_alive_interval
x keep_alive_max_attempt, and a dead participant of the running group is what the survivors of a lost node wait
out before they re-form. A shorter keep-alive re-forms sooner after a real loss, and takes a living agent for dead
sooner when its keep-alive thread is starved. This measures that starvation where it happens: three real agents
(the image's entrypoint, `python -m ddp_trainer.torchrun`, the bundled digits trainer, gloo on CPU) form one
2..3-node group on this machine, with --hogs busy processes beside them, and the rendezvous state is read from the
group's store every 0.2 s (the same pickled state the agents sanitize). Reported per run:
- the oldest heartbeat seen (the interval plus the worst starvation), its ratio to the keep-alive's limit;
- rounds: the rendezvous' round at the end (0: the group never re-formed), and its participants then (fewer than
  3: a living agent was taken for dead);
- the agents' exit codes, and each worker's last logged step.
With --starve-agent S, agent 1 itself (its worker runs on) is stopped for S seconds 30 s in: what a living agent
taken for dead costs. With --kill-agent, a non-rank-0 agent and its worker are killed 30 s in (a node lost): the
survivors re-form without it, and the time to their next step is what InPlace's keep-alive and last call cost.

    python bench/rendezvous_keepalive.py [--keep-alive 1 3] [--hogs 0 4] [--seconds 150] [--kill-agent] [--append]"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import signal
import subprocess
import sys
import tempfile
import time
from base64 import b64decode
from datetime import UTC, datetime
from pathlib import Path

import torch.distributed as dist

from machine import describe_machine  # bench/ is on sys.path: this script's own directory

ROOT = Path(__file__).resolve().parent.parent

RUN_ID = "keepalive"
AGENTS = 3
HOG = "while True: pass"
STARVE_AFTER_S = 30
STEP = re.compile(r"rank=\d+\] step=(\d+)/")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def agent(i: int, port: int, interval: int, attempts: int, last_call: int, steps: int, work: Path) -> subprocess.Popen:
    conf = (
        f"is_host=false,join_timeout=120,last_call_timeout={last_call},"
        f"keep_alive_interval={interval},keep_alive_max_attempt={attempts}"
    )
    args = [
        sys.executable, "-m", "ddp_trainer.torchrun", f"--nnodes={AGENTS - 1}:{AGENTS}", "--nproc-per-node=1",
        "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={RUN_ID}", f"--rdzv-conf={conf}",
        "--max-restarts=3", "--module", "ddp_trainer", "--workload=digits", f"--train.steps={steps}",
        "--train.global-batch-size=96", "--train.lr=0.002", f"--checkpoint.dir={work / 'ckpt'}",
        "--checkpoint.every-steps=50", "--log.every-steps=5", f"--metrics.port={free_port()}",
    ]  # fmt: skip
    env = {**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "PYTHONUNBUFFERED": "1"}
    with open(work / f"agent{i}.log", "w") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def run(
    interval: int, attempts: int, last_call: int, hogs: int, seconds: float, steps: int, starve: float, kill: bool
) -> dict:
    limit = interval * attempts
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    work = Path(tempfile.mkdtemp(prefix="ddp-keepalive-"))
    hog_procs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(hogs)]
    agents = [agent(i, port, interval, attempts, last_call, steps, work) for i in range(AGENTS)]
    oldest, rounds, complete_seen, started = 0.0, 0, False, time.monotonic()
    starved_at, participants, killed_at, back_after = None, 0, None, None
    try:
        while time.monotonic() - started < seconds and any(a.poll() is None for a in agents):
            time.sleep(0.2)
            if starve and complete_seen and starved_at is None and time.monotonic() - started > STARVE_AFTER_S:
                # --starve-agent: agent 1 itself (not its worker) stopped, as a starved keep-alive thread would be.
                starved_at = time.monotonic()
                os.kill(agents[1].pid, signal.SIGSTOP)
                print(f"  agent 1 stopped for {starve:g}s", flush=True)
            if starved_at is not None and starved_at > 0 and time.monotonic() - starved_at >= starve:
                os.kill(agents[1].pid, signal.SIGCONT)
                starved_at = -1.0
            if kill and complete_seen and killed_at is None and time.monotonic() - started > STARVE_AFTER_S:
                # --kill-agent: a node lost, as the local nodes' stopped agent: a non-rank-0 agent and its worker.
                victim = next(i for i in range(AGENTS) if "rank=0]" not in (work / f"agent{i}.log").read_text())
                watched = next(i for i in range(AGENTS) if i != victim)
                seen = len(STEP.findall((work / f"agent{watched}.log").read_text()))
                killed_at = time.monotonic()
                os.killpg(agents[victim].pid, signal.SIGKILL)
                print(f"  agent {victim} and its worker killed", flush=True)
            if (
                killed_at is not None
                and back_after is None
                and len(STEP.findall((work / f"agent{watched}.log").read_text())) > seen
            ):
                back_after = time.monotonic() - killed_at
                print(f"  agent {watched}'s worker logged a step {back_after:.1f}s after the kill", flush=True)
            if not store.check([f"torch.rendezvous.{RUN_ID}"]):
                continue
            try:  # the key holds a sentinel until the first agent writes a state
                state = pickle.loads(b64decode(store.get(f"torch.rendezvous.{RUN_ID}")))
            except (pickle.UnpicklingError, EOFError):
                continue
            rounds, participants = state.round, len(state.participants)
            if not state.complete:
                continue
            complete_seen = True
            now = datetime.now(UTC)
            ages = [(now - beat).total_seconds() for beat in state.last_heartbeats.values()]
            if (
                starved_at is None and killed_at is None and max(ages) > oldest
            ):  # the starved agent's own staleness is the test's
                oldest = max(ages)
                print(
                    f"  {time.monotonic() - started:5.0f}s: round {rounds}, oldest heartbeat {oldest:.2f}s", flush=True
                )
    finally:
        for p in hog_procs:
            p.kill()
        for a in agents:
            if a.poll() is None:
                a.terminate()
        codes = [a.wait(timeout=60) for a in agents]
    logs = [(work / f"agent{i}.log").read_text() for i in range(AGENTS)]
    worker_starts = [log.count("] started pid=") for log in logs]
    last_steps = [max((int(m) for m in STEP.findall(log)), default=0) for log in logs]
    return {
        "keep_alive_interval_s": interval,
        "keep_alive_max_attempt": attempts,
        "dead_after_s": limit,
        "last_call_s": last_call,
        "hogs": hogs,
        "agent_starved_s": starve,
        "agent_killed": kill,
        # --kill-agent: from the kill to a survivor's next step line (lines every 5 steps, about 0.5 s apart)
        "survivor_step_after_kill_s": None if back_after is None else round(back_after, 1),
        "seconds": round(time.monotonic() - started, 1),
        "group_formed": complete_seen,
        "oldest_heartbeat_s": round(oldest, 2),
        "oldest_to_limit": round(oldest / limit, 2),
        "final_round": rounds,
        "participants_at_end": participants,  # fewer than 3: an agent was taken for dead (and the group went on)
        "worker_starts": worker_starts,  # per agent: 1, and 2 for a survivor of one re-form
        "last_step_logged": last_steps,  # each worker's: equal when the group trained on as one
        "agent_exit_codes": codes,  # stopped at --seconds (SIGTERM): 1
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep-alive", nargs=2, type=int, action="append", metavar=("INTERVAL", "ATTEMPTS"))
    parser.add_argument("--last-call", type=int, default=2)
    parser.add_argument("--hogs", nargs="+", type=int, default=[0, 4], help="busy processes beside the 3 agents")
    parser.add_argument("--seconds", type=float, default=150)
    parser.add_argument("--starve-agent", type=float, default=0, help="stop agent 1 this long, 30 s in")
    parser.add_argument("--kill-agent", action="store_true", help="kill a non-rank-0 agent and its worker, 30 s in")
    parser.add_argument("--steps", type=int, default=100000, help="more than the run lasts: it is stopped")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "rendezvous_keepalive.json")
    parser.add_argument("--append", action="store_true", help="add the rows to --out's")
    args = parser.parse_args()
    rows = json.loads(args.out.read_text())["rows"] if args.append and args.out.exists() else []
    for interval, attempts in args.keep_alive or [(1, 3)]:
        for hogs in args.hogs:
            row = run(
                interval, attempts, args.last_call, hogs, args.seconds, args.steps, args.starve_agent, args.kill_agent
            )
            print(json.dumps(row), flush=True)
            rows.append(row)
    result = {"benchmark": "rendezvous_keepalive", "machine": describe_machine(), "agents": AGENTS, "rows": rows}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
