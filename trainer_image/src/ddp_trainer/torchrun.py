"""`python -m ddp_trainer.torchrun`, the image's entrypoint: torchrun, plus the failed worker's last stderr lines
in the termination log.

A worker that dies before any code of ours runs (a missing script, an import error, a bad argument to the user's
own script, a crash in native code) writes no error file, so torchrun's @record leaves TORCHELASTIC_ERROR_FILE (the
pod's termination log) empty and the kubelet falls back to the last 2 KiB of the container's log. With two or more
processes a pod, torchrun's report for each rank fills those 2 KiB and the line that says what to fix is gone.

So this runs torchrun in this process (its own `main`, exactly as the `torchrun` script does), with each worker's
stderr also kept in a file (`--tee=2`, unless the arguments already choose where output goes), and when torchrun
fails with no error file for its root-cause worker, writes that worker's last stderr lines to the error file in the
JSON shape torchrun's own error files have (`message.message`, `message.errorCode`), which the operator reads.
Everything else (exit code, signals, console output but for torchrun's `[default<rank>]:` prefix on tee'd stderr
lines) is torchrun's own.

When torchrun's agent gives up after restarting its workers in place (`--max-restarts`, the operator's InPlace
restart strategy), the error file also says how many times it did (`ddpjobInPlaceRestarts`): the operator counts
them against the job's budget even when no trainer metric told it of them.

While torchrun runs, it serves the agent's in-place restart count on `DDPJOB_AGENT_METRICS_PORT`
(`ddpjob_agent_restarts`) when the operator sets that port (restartStrategy InPlace): torchrun counts only its own
workers' failures, so the operator reads every pod's agent, not only worker 0's trainer, and a script of the
user's own that serves no metrics is counted while it runs too.

It also hands the pod's termination-log path to the workers (final_step.TERMINATION_LOG_ENV; torchrun points
their TORCHELASTIC_ERROR_FILE at files of its own), so that worker 0 can leave its final step there on success.

As a container's PID 1 it first becomes that container's init (pid1.py): a parent that reaps orphans and forwards
signals, with torchrun in its child."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .final_step import TERMINATION_LOG_ENV, is_final_step_record
from .pid1 import become_init
from .warm_workers import prepare_fork_server, start_fork_server, warm_worker_args

if TYPE_CHECKING:
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

# Enough lines for a short traceback's end; few enough characters that the operator (1024) and the kubelet (4096
# bytes) keep all of them, so the last line, the cause, is never the one cut.
STDERR_TAIL_LINES = 12
STDERR_TAIL_CHARS = 800
ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"

_ATTEMPT = re.compile(r"attempt_(\d+)$")


def main(argv: list[str] | None = None) -> None:
    become_init()  # as a container's PID 1: reap orphans and forward signals from a parent (pid1.py)
    args = list(sys.argv[1:] if argv is None else argv)
    if os.environ.get(ERROR_FILE_ENV):
        os.environ.setdefault(TERMINATION_LOG_ENV, os.environ[ERROR_FILE_ENV])
    # The warm workers' fork server imports torch beside this process, which imports it next (warm_workers.py).
    start_fork_server(args)
    from torch.distributed import run as torch_run
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    chosen = torch_run.parse_args(args)
    own_log_dir = None
    if not chosen.log_dir:
        own_log_dir = tempfile.mkdtemp(prefix="ddp-trainer-torchrun-")
        args = [f"--log-dir={own_log_dir}", *args]
    if chosen.tee == "0" and chosen.redirects == "0":
        args = ["--tee=2", *args]
    log_dir = Path(chosen.log_dir or own_log_dir or "")
    after_loss = last_call_after_loss(os.environ)
    if after_loss is not None:
        shorten_last_call_after_first_round(timedelta(seconds=after_loss))
    agent_endpoint = serve_agent_restarts(log_dir, os.environ)
    warm = warm_worker_args(args)
    if warm is not None:
        args = warm
        prepare_fork_server()
    try:
        torch_run.main(args)
        record_in_place_restarts(log_dir, os.environ.get(ERROR_FILE_ENV, ""), create=True)
    except ChildFailedError as failed:
        _, failure = failed.get_first_failure()
        error_file = os.environ.get(ERROR_FILE_ENV, "")
        record_stderr_tail(failure, log_dir, error_file)
        record_in_place_restarts(log_dir, error_file)
        raise
    finally:
        if agent_endpoint is not None:
            agent_endpoint.shutdown()
            agent_endpoint.server_close()
        if own_log_dir:
            shutil.rmtree(own_log_dir, ignore_errors=True)


# The operator's api.RDZV_LAST_CALL_AFTER_LOSS_ENV (tests/trainer/test_torchrun_last_call.py).
LAST_CALL_AFTER_LOSS_ENV = "DDPJOB_RDZV_LAST_CALL_AFTER_LOSS_SECONDS"


def last_call_after_loss(environ: Mapping[str, str]) -> float | None:
    """The rendezvous last call for every round after the agent's first, in seconds, when the operator sets one
    (restartStrategy InPlace); None leaves torchrun's one last call (PET_RDZV_CONF's) for every round."""
    try:
        seconds = float(environ.get(LAST_CALL_AFTER_LOSS_ENV, ""))
    except ValueError:
        return None
    return seconds if seconds > 0 else None


def shorten_last_call_after_first_round(last_call: timedelta, handler_class: Any = None) -> Any:
    """Make every c10d rendezvous handler wait `last_call` in the rounds after its first. The first round is the
    group's formation while its pods still start: it keeps PET_RDZV_CONF's long last call, so that a late pod is
    waited for rather than joining later as a membership change that restarts the whole group. A later round is a
    re-form after a loss, every survivor already running: a long wait is only stall. torchrun reads one last call
    for every round; its handler keeps it in its settings' RendezvousTimeout, which this sets after the first
    round. Returns a function that undoes it (`.original`: the method it wrapped)."""
    if handler_class is None:
        from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

        handler_class = DynamicRendezvousHandler
    original = handler_class.next_rendezvous

    def next_rendezvous(self: Any) -> Any:
        info = original(self)
        self._settings.timeout._set_timeouts(last_call=last_call)
        return info

    handler_class.next_rendezvous = next_rendezvous

    def restore() -> None:
        handler_class.next_rendezvous = original

    restore.original = original  # type: ignore[attr-defined]
    return restore


AGENT_PORT_ENV = "DDPJOB_AGENT_METRICS_PORT"  # the operator's api.AGENT_METRICS_PORT_ENV (tests/unit/test_contract.py)
AGENT_RESTARTS_SERIES = "ddpjob_agent_restarts"


class AgentRestarts(Collector):
    """The agent's in-place restart count, read from torchrun's log folders at each scrape."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            AGENT_RESTARTS_SERIES,
            "Times this pod's torchrun agent restarted its workers after one of them failed",
            value=in_place_restarts(self.log_dir),
        )


def serve_agent_restarts(log_dir: Path, environ: Mapping[str, str]) -> Any:
    """The agent's endpoint (None when no port is set, or it cannot listen: the count then reaches the operator at
    the pod's end, in its termination record; the training never suffers for it)."""
    port = environ.get(AGENT_PORT_ENV, "")
    if not port:
        return None
    registry = CollectorRegistry()
    registry.register(AgentRestarts(log_dir))
    try:
        server, _ = start_http_server(int(port), addr=environ.get("POD_IP") or "0.0.0.0", registry=registry)
    except (OSError, ValueError) as e:
        print(f"ddp_trainer.torchrun: agent restarts endpoint disabled ({AGENT_PORT_ENV}={port}): {e}", file=sys.stderr)
        return None
    return server


def record_stderr_tail(failure: ProcessFailure, log_dir: Path, error_file: str) -> bool:
    """Write the failed worker's last stderr lines to `error_file` when torchrun had no error file of the
    worker's to put there (and nothing else wrote one). True when it wrote."""
    if not error_file or os.path.isfile(failure.error_file):
        return False
    if _holds_final_step(error_file):
        Path(error_file).write_text("")  # worker 0 finished, yet the pod failed: its success is no verdict
    elif _has_content(error_file):
        return False
    stderr_log = worker_stderr_log(log_dir, failure.local_rank)
    tail = last_lines(stderr_log.read_text(errors="replace")) if stderr_log else ""
    if not tail:
        return False
    Path(error_file).write_text(json.dumps(error_record(tail, failure.exitcode, failure.local_rank)))
    return True


IN_PLACE_RESTARTS_KEY = "ddpjobInPlaceRestarts"


def in_place_restarts(log_dir: Path) -> int:
    """How many times this agent restarted its workers: torchrun keeps one `attempt_<n>` folder per start."""
    found = [int(m.group(1)) for p in log_dir.glob("*/attempt_*") if (m := _ATTEMPT.search(p.name))]
    return max(found, default=0)


def record_in_place_restarts(log_dir: Path, error_file: str, create: bool = False) -> bool:
    """Add the agent's in-place restart count to the JSON record in `error_file` (the pod's termination log): to
    torchrun's error record on a failure, to worker 0's final step on success. `create`: on success, a pod whose
    log is empty gets a record of its own (on a failure an empty log must stay empty: the kubelet then keeps the
    container's last log lines instead)."""
    restarts = in_place_restarts(log_dir)
    if not error_file or not restarts:
        return False
    try:
        text = Path(error_file).read_text() if os.path.exists(error_file) else ""
        record = json.loads(text) if text.strip() or not create else {}
    except (OSError, ValueError):
        return False
    if not isinstance(record, dict):
        return False
    record[IN_PLACE_RESTARTS_KEY] = restarts
    Path(error_file).write_text(json.dumps(record))
    return True


def error_record(tail: str, exit_code: int, local_rank: int) -> dict:
    """The shape of torchrun's error files after it copies the root cause's into its own (errorCode added)."""
    return {
        "message": {
            "message": tail,
            "errorCode": exit_code,
            "extraInfo": {
                "source": f"stderr of local rank {local_rank}, which wrote no error file",
                "timestamp": str(int(time.time())),
            },
        }
    }


def worker_stderr_log(log_dir: Path, local_rank: int) -> Path | None:
    """torchrun keeps `<log_dir>/<run id>/attempt_<n>/<local rank>/stderr.log`; the failure is the last attempt's."""
    attempts: dict[int, Path] = {}
    for path in log_dir.glob(f"*/attempt_*/{local_rank}/stderr.log"):
        match = _ATTEMPT.search(path.parent.parent.name)
        if match:
            attempts[int(match.group(1))] = path
    return attempts[max(attempts)] if attempts else None


def last_lines(text: str) -> str:
    """At most STDERR_TAIL_LINES non-blank lines and STDERR_TAIL_CHARS characters from the end, whole lines
    (one line longer than the limit keeps its end)."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()][-STDERR_TAIL_LINES:]
    while len(lines) > 1 and len("\n".join(lines)) > STDERR_TAIL_CHARS:
        lines.pop(0)
    return "\n".join(lines)[-STDERR_TAIL_CHARS:]


def _holds_final_step(path: str) -> bool:
    try:
        return is_final_step_record(Path(path).read_text())
    except OSError:
        return False


def _has_content(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


if __name__ == "__main__":
    main()
