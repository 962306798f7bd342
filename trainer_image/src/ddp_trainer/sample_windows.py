"""What a log window counts and rates: ddp_trainer_samples_total moves by the samples this process trained in the
window, and samples/s (with tokens/s and MFU, derived from it) rates them over the window's seconds, less a step
that compiled (compile_watch.py). Under torchft a heal moves the group's sample count to a live peer's (its
batches committed): those steps were the peer's work, so they move the windows' starts with them and are
neither counted nor rated here; ddp_trainer_run_samples, the run's count, carries them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SampleWindows:
    window_samples: int = 0  # the sample count when the log window began
    rate_samples: int = 0  # and when the rate's window began (a compiling step restarts it)
    rate_start: float = 0.0
    throughput: float = 0.0  # samples/s of the last window that trained a step it did not compile

    def start(self, samples: int, now: float) -> None:
        """A log window begins (the loop's start, each log step)."""
        self.window_samples = samples
        self.restart_rate(samples, now)

    def restart_rate(self, samples: int, now: float) -> None:
        self.rate_samples, self.rate_start = samples, now

    def received(self, samples: int) -> None:
        """A heal moved the count by `samples` that another group trained."""
        self.window_samples += samples
        self.rate_samples += samples

    def counted(self, samples: int) -> int:
        """The samples this process trained in the log window, the count now being `samples`."""
        return samples - self.window_samples

    def rate(self, samples: int, now: float) -> float:
        """Samples/s since the rate's window began; a window that trained nothing rated keeps the last figure."""
        rated = samples - self.rate_samples
        if rated > 0:
            self.throughput = rated / max(now - self.rate_start, 1e-9)
        return self.throughput
