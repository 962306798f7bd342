"""One in-place restart of the bundled harness under `python -m ddp_trainer.torchrun`, on whatever device the machine
has (hack/gpu_checks.sh runs it on a lent GPU): the worker is SIGKILLed once it logs step `--kill-at`, torchrun
(`--max-restarts 1`) starts it again, it resumes from its last checkpoint and finishes. Run with the warm fork
server (the default) and with `DDP_TRAINER_WARM_WORKERS=0`, it shows that a worker forked from the server gets CUDA
(and NCCL, and torch.compile's workers) at its first start and at its restart, and what each start costs.

Writes a JSON of the two runs: exit code, each start's `ready process_s`, the resumed step, the final step, wall."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from ddp_trainer import progress_log, warm_workers


def one_run(warm: bool, harness_args: list[str], kill_at: int, timeout: float) -> dict:
    env = dict(os.environ, DDP_TRAINER_WARM_WORKERS="1" if warm else "0", PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory() as ckpt:
        cmd = [
            sys.executable,
            "-m",
            "ddp_trainer.torchrun",
            "--standalone",
            "--nproc-per-node",
            "1",
            "--max-restarts",
            "1",
            "-m",
            "ddp_trainer",
            *harness_args,
            "--checkpoint.dir",
            ckpt,
        ]
        started = time.monotonic()
        agent = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: list[str] = []
        killed: list[int] = []
        timer = threading.Timer(timeout, agent.kill)
        timer.start()
        assert agent.stdout is not None
        for line in agent.stdout:
            sys.stdout.write(("warm | " if warm else "cold | ") + line)
            lines.append(line)
            m = progress_log.PROGRESS.search(line)
            if m and not killed and int(m["step"]) >= kill_at:
                killed = warm_workers.worker_pids(agent.pid)
                for pid in killed:
                    os.kill(pid, signal.SIGKILL)
        code = agent.wait()
        timer.cancel()
    text = "".join(lines)
    return {
        "warm": warm,
        "exit_code": code,
        "killed_pids": killed,
        "ready_process_s": [float(m["process"]) for m in progress_log.READY.finditer(text)],
        "resumed_step": [int(m["step"]) for m in progress_log.RESUMED.finditer(text)],
        "done_step": [int(m["step"]) for m in progress_log.DONE.finditer(text)],
        "compiled_s": [float(m["seconds"]) for m in progress_log.COMPILED.finditer(text)],
        "wall_s": round(time.monotonic() - started, 1),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--kill-at", type=int, default=150)
    p.add_argument("--timeout", type=float, default=240)
    p.add_argument("--modes", default="warm,cold", help="warm, cold or both, in that order")
    p.add_argument("harness_args", nargs=argparse.REMAINDER, help="after --: the harness's own flags")
    a = p.parse_args()
    harness_args = a.harness_args[1:] if a.harness_args[:1] == ["--"] else a.harness_args
    runs = [one_run(mode == "warm", harness_args, a.kill_at, a.timeout) for mode in a.modes.split(",")]
    with open(a.out, "w") as f:
        json.dump({"harness_args": harness_args, "kill_at": a.kill_at, "runs": runs}, f, indent=2)
    for r in runs:
        print(json.dumps(r))
    ok = all(
        r["exit_code"] == 0 and r["killed_pids"] and r["resumed_step"] and len(r["ready_process_s"]) == 2 for r in runs
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
