"""`python -m torch.distributed.run ... tests/trainer/sigterm_worker.py [trainer flags]`: the harness as
ddp_trainer's main() runs it, except that rank SIGTERM_RANK sends itself SIGTERM in the middle of step
SIGTERM_AT_STEP (inside its optimizer step) and writes the time it did to SIGTERM_TIME_FILE. The test then knows
exactly which step the signal landed in, with no polling lag."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import torch.distributed as dist

from ddp_trainer.config import parse_config
from ddp_trainer.distributed_env import DistEnv, choose_device, init_process_group
from ddp_trainer.process_exit import leave
from ddp_trainer.progress_log import Identity
from ddp_trainer.trainer import Trainer


def main() -> int:
    cfg = parse_config(sys.argv[1:])
    env = DistEnv.from_environ()
    device = choose_device(env)
    init_process_group(env, device)
    trainer = Trainer(cfg, env, device, Identity.from_environ(env.rank))
    trainer.resume()
    at = int(os.environ.get("SIGTERM_AT_STEP", "0"))
    if at and env.rank == int(os.environ["SIGTERM_RANK"]):
        step_optimizer = trainer.optimizer.step

        def step_and_maybe_signal(*args, **kwargs):
            if trainer.step == at - 1:  # trainer.step counts finished steps: this is step `at` itself
                Path(os.environ["SIGTERM_TIME_FILE"]).write_text(repr(time.time()))
                os.kill(os.getpid(), signal.SIGTERM)
            return step_optimizer(*args, **kwargs)

        trainer.optimizer.step = step_and_maybe_signal  # type: ignore[method-assign]
    code = trainer.train()
    dist.destroy_process_group()
    return code


if __name__ == "__main__":
    leave(main())
