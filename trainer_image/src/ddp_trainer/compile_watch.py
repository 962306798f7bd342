"""torch.compile's cost, kept apart from the training throughput.

Compiling happens inside steps: the first one (dynamo traces the forward, inductor builds the kernels, the backward
compiles at its first run) and any later one whose guards fail (a new input shape: the last micro-batch of an
uneven split, or a process that resumed at another world size). A step in which dynamo compiled a graph is timed
apart: its seconds go to `ddp_trainer_compile_seconds_total` and a `compiled` line, and the samples/s of its log
window leave it out (trainer._report). Every process starts with nothing compiled, so a restart or a resize
compiles again (inductor's on-disk cache makes that faster): the `compiled` line of the new attempt, and its
`ddp_trainer_compiled_graphs_total`, say so."""

from __future__ import annotations

import time

from .metrics import TrainerMetrics
from .progress_log import Identity, compiled_line, emit


def compiled_graphs() -> int:
    """The graphs dynamo has compiled in this process (its own counter, moved once per graph it captures)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


class CompileWatch:
    def __init__(self, metrics: TrainerMetrics, who: Identity, talks: bool = True, clock=time.monotonic):
        self.metrics, self.who, self.talks, self.clock = metrics, who, talks, clock
        self.graphs = compiled_graphs()  # before the first step: what this process compiled elsewhere (none)
        self.total_graphs = 0
        self.seconds = 0.0

    def compiled_in_step(self, step: int, started: float) -> bool:
        """After a step that began at `started`: True when it compiled, and then its time is counted and said."""
        now = compiled_graphs()
        if now == self.graphs:
            return False
        graphs, self.graphs = now - self.graphs, now
        seconds = self.clock() - started
        self.total_graphs += graphs
        self.seconds += seconds
        self.metrics.compile_seconds.inc(seconds)
        self.metrics.compiled_graphs.inc(graphs)
        if self.talks:
            emit(compiled_line(self.who, step, graphs, self.total_graphs, seconds, self.seconds))
        return True
