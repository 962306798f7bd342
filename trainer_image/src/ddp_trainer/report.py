"""Progress from your own training loop: `report(step, loss, samples)` once per step serves the series the bundled
harness serves (ddp_trainer_step, _loss, _samples_total, _run_samples, _samples_per_second, _world_size,
_torchrun_restarts, _total_steps), so a
DDPJob running your script gets status.progress, the STEP column, the alerts, the dashboard and the
progress deadline. Usable on its own: it imports neither torch nor the harness's trainer or config.

    from ddp_trainer.report import report

    for step in range(start, steps):
        loss = train_one_step(...)
        report(step=step + 1, loss=loss, samples=(step + 1) * global_batch)

The first call starts the endpoint on $POD_IP (or 0.0.0.0):<base + LOCAL_RANK>, base = $DDP_TRAINER_METRICS_PORT
or 9400 (0 turns it off), as the harness's --metrics.port. Every rank may call it; a rank that cannot listen
warns once and trains on. A call stores a few values and reads the clock: no lock, no I/O, no collective, no
device sync. A loss tensor is kept detached and read only when the endpoint is scraped, so `.item()` is not
needed; the samples rate is recomputed at most once a second. `samples` is the run's count since step 0 (served as
ddp_trainer_run_samples); the ddp_trainer_samples_total counter counts from 0 at this process's first report, so
a resumed loop's count is no jump."""

from __future__ import annotations

import atexit
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, SupportsFloat

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .final_step import write_final_step
from .metrics import (
    DEFAULT_PORT,
    LABELS,
    LOSS_SERIES,
    PORT_ENV,
    RUN_SAMPLES_SERIES,
    SAMPLES_PER_SECOND_SERIES,
    SAMPLES_SERIES,
    STEP_SERIES,
    TORCHRUN_RESTARTS_SERIES,
    TOTAL_STEPS_SERIES,
    WORLD_SIZE_SERIES,
    label_values,
    metrics_address,
)
from .progress_log import Identity

RATE_WINDOW_SECONDS = 1.0


class ProgressReporter:
    """The endpoint and the latest values of one process. `report()` and `serve()` share one per process; tests
    build their own (a port, an environment, a clock)."""

    def __init__(
        self,
        port: int | None = None,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._environ = os.environ if environ is None else environ
        self._base_port = port
        self._clock = clock
        self._lock = threading.Lock()
        self._serving: bool | None = None  # None: not tried yet
        self._server: Any = None
        self.address: tuple[str, int] | None = None
        self.step: int | None = None
        self.total_steps: int | None = None
        self.loss: SupportsFloat | None = None
        self.samples: int | None = None
        self._first_samples: int | None = None  # the count at this process's first report: its counter's zero
        self.samples_per_second: float | None = None
        self._window: tuple[float, int] | None = None  # (when, samples) at the start of the rate window
        rank = _int_env(self._environ, "RANK", 0)
        who = Identity.from_environ(rank, self._environ)
        self._label_values = list(label_values(who.job, who.attempt, rank).values())
        self.world_size = _int_env(self._environ, "WORLD_SIZE", 1)
        self.restart_count = _int_env(self._environ, "TORCHELASTIC_RESTART_COUNT", 0)
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def report(
        self,
        step: int,
        loss: SupportsFloat | None = None,
        samples: int | None = None,
        total_steps: int | None = None,
    ) -> None:
        if self._serving is None:
            self.serve()
        self.step = step
        if total_steps is not None:
            self.total_steps = total_steps
        if loss is not None:
            # A tensor would keep its autograd graph alive until the next call; detaching does not sync.
            self.loss = loss if loss.__class__ is float else _detached(loss)
        if samples is not None:
            previous, self.samples = self.samples, samples
            if self._first_samples is None or samples < self._first_samples:
                self._first_samples = samples
            now = self._clock()
            window = self._window
            if window is None or (previous is not None and samples < previous):  # a count that went back
                self._window = (now, samples)
            elif now - window[0] >= RATE_WINDOW_SECONDS:
                self.samples_per_second = (samples - window[1]) / (now - window[0])
                self._window = (now, samples)

    def serve(self) -> bool:
        """Start the endpoint (once; later calls say whether it listens). A bad port setting or a port in use
        warns and returns False: the endpoint is lost, never the training run."""
        with self._lock:
            if self._serving is not None:
                return self._serving
            self._serving = False
            address = self.endpoint_address()
            if address is None:
                return False
            try:
                self._server, _ = start_http_server(address[1], addr=address[0], registry=self.registry)
            except OSError as e:
                _warn(f"cannot listen on {address[0]}:{address[1]}: {e}")
                return False
            self.address = (address[0], self._server.server_port)
            self._serving = True
            return True

    def close(self) -> None:
        with self._lock:
            if self._server is not None:
                self._server.shutdown()
                self._server.server_close()
                self._server = None
            self._serving = False

    def endpoint_address(self) -> tuple[str, int] | None:
        """(host, port) this process serves on by the port rule; None when turned off or misconfigured (warns)."""
        base, local_rank = self._base_port, self._environ.get("LOCAL_RANK", "0")
        if base is None:
            text = self._environ.get(PORT_ENV, "")
            if text and not text.isdigit():
                _warn(f"{PORT_ENV} must be a port number, got {text!r}")
                return None
            base = int(text) if text else DEFAULT_PORT
        if not local_rank.isdigit():
            _warn(f"LOCAL_RANK must be a number, got {local_rank!r}")
            return None
        address = metrics_address(base, int(local_rank), self._environ)
        if address is not None and not 0 < address[1] <= 65535:
            _warn(f"port {base} + LOCAL_RANK {local_rank} is outside 1..65535")
            return None
        return address

    def collect(self) -> Iterator[Metric]:
        """Called by the endpoint's thread at each scrape: the only place values are converted."""
        values: list[tuple[str, str, float | None]] = [
            (STEP_SERIES, "Training steps completed, as the loop reported them", self.step),
            (LOSS_SERIES, "Training loss this rank reported last", _float_or_none(self.loss)),
            (SAMPLES_PER_SECOND_SERIES, "Group throughput over the last second or more", self.samples_per_second),
            (WORLD_SIZE_SERIES, "Ranks in the process group (WORLD_SIZE)", self.world_size),
            (TOTAL_STEPS_SERIES, "The step the run ends at, as the loop reported it", self.total_steps),
            (TORCHRUN_RESTARTS_SERIES, "torchrun in-place restarts (TORCHELASTIC_RESTART_COUNT)", self.restart_count),
            (RUN_SAMPLES_SERIES, "Training samples the run consumed since step 0, as the loop reported", self.samples),
        ]
        for name, doc, value in values:
            if value is not None:
                gauge = GaugeMetricFamily(name, doc, labels=LABELS)
                gauge.add_metric(self._label_values, value)
                yield gauge
        if self.samples is not None and self._first_samples is not None:
            counter = CounterMetricFamily(
                SAMPLES_SERIES, "Training samples the group consumed since this process's first report", labels=LABELS
            )
            counter.add_metric(self._label_values, self.samples - self._first_samples)
            yield counter


_shared: ProgressReporter | None = None
_shared_lock = threading.Lock()


def shared_reporter(port: int | None = None) -> ProgressReporter:
    """This process's reporter; `port` (a base port, + LOCAL_RANK) counts only on the call that creates it. On
    rank 0 the last step reported is left in the pod's termination record when the process exits (final_step.py),
    as the harness does: the operator's last scrape can be a scrape interval before the end, and a Succeeded job
    shows the step it finished at."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = ProgressReporter(port)
            if _int_env(os.environ, "RANK", 0) == 0:
                atexit.register(_leave_final_step, _shared)
        return _shared


def _leave_final_step(reporter: ProgressReporter) -> None:
    if reporter.step is not None:
        write_final_step(reporter.step)  # on a failure the entrypoint clears it (torchrun.record_stderr_tail)


def report(
    step: int, loss: SupportsFloat | None = None, samples: int | None = None, total_steps: int | None = None
) -> None:
    """Record this rank's progress. step: steps completed (global, continuing across restarts); loss: a float or
    a tensor; samples: samples the whole group has consumed so far (step x global batch for a fixed batch);
    total_steps: the step the run ends at, once known (the operator shows percent done and an ETA from it)."""
    (_shared or shared_reporter()).report(step, loss, samples, total_steps)


def serve(port: int | None = None) -> bool:
    """Start the endpoint before the first report() (e.g. while data loads), on base port `port` (default
    $DDP_TRAINER_METRICS_PORT or 9400) + LOCAL_RANK. True when it listens."""
    return shared_reporter(port).serve()


def _warn(problem: str) -> None:
    warnings.warn(f"ddp_trainer.report: no progress endpoint: {problem}; training goes on", RuntimeWarning, 2)


def _detached(value: SupportsFloat) -> SupportsFloat:
    detach = getattr(value, "detach", None)
    return value if detach is None else detach()


def _int_env(environ: Mapping[str, str], name: str, default: int) -> int:
    try:
        return int(environ.get(name) or default)
    except ValueError:
        return default


def _float_or_none(value: SupportsFloat | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):  # e.g. a tensor of more than one element
        return None
