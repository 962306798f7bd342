"""What worker 0 leaves in its pod's termination message when training completes: the final step. The operator's
last scrape of the metrics endpoint can be a scrape interval older than the exit (a 3,000-step job ended Succeeded
showing step 2899), so its success policy reads this instead when it is newer.

Inside a worker, TORCHELASTIC_ERROR_FILE is torchrun's per-rank error file, not the pod's termination log; the
image's entrypoint (ddp_trainer.torchrun) passes the pod's path down in TERMINATION_LOG_ENV. Under plain torchrun
nothing is written and the status keeps the last scrape."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

TERMINATION_LOG_ENV = "DDP_TRAINER_TERMINATION_LOG"
FINISHED_KEY = "finished"  # {"finished": {"step": N}}; torchrun's error files have "message" at the top instead


def final_step_record(step: int) -> str:
    return json.dumps({FINISHED_KEY: {"step": step}})


def is_final_step_record(text: str) -> bool:
    try:
        record = json.loads(text)
    except ValueError:
        return False
    return isinstance(record, dict) and FINISHED_KEY in record


def write_final_step(step: int, environ: Mapping[str, str] | None = None) -> bool:
    """True when written. Best effort: a read-only or missing path must not fail a finished job."""
    path = (os.environ if environ is None else environ).get(TERMINATION_LOG_ENV)
    if not path:
        return False
    try:
        Path(path).write_text(final_step_record(step))
    except OSError:
        return False
    return True
