"""Percent done and time left for status.progress (pure): from the step the run ends at (worker 0's
`ddp_trainer_total_steps`: the harness's --train.steps, or `report(total_steps=...)` in a user's own loop) and the
step rate between the last two progress writes of the same attempt and in-place restart. The `kubectl get`
PROGRESS column and `kubectl ddpj watch` read them.

The rate is measured between writes (their advanceTime), not scrapes: writes are seconds apart, so second-precision
timestamps are precise enough, and a restart's reload and warm-up never count (a new attempt, or a group torchrun
restarted in place, starts without an ETA until it has advanced twice)."""

from __future__ import annotations

from ..state.status import Progress
from ..timefmt import parse_time

DERIVED = ("percent", "etaSeconds", "text")


def with_eta(old: Progress, new: Progress) -> Progress:
    """`new` (a copy) with percent, etaSeconds and text where the total is known; without them where it is not."""
    out: Progress = {k: v for k, v in new.items() if k not in DERIVED}  # type: ignore[assignment]
    total, step = new.get("totalSteps"), new.get("step")
    if not total or step is None:
        return out
    out["percent"] = max(0, min(100, step * 100 // total))
    eta = _eta(old, new, total, step)
    if eta is not None:
        out["etaSeconds"] = eta
    out["text"] = f"{out['percent']}%" + (f" ETA {duration(eta)}" if eta else "")  # none left: just 100%
    return out


def _eta(old: Progress, new: Progress, total: int, step: int) -> int | None:
    if step >= total:
        return 0
    if old.get("attempt") != new.get("attempt") or old.get("inPlaceRestarts") != new.get("inPlaceRestarts"):
        return None  # a new group, or one restarted in place: its reload is not its rate
    then, now = parse_time(old.get("advanceTime")), parse_time(new.get("advanceTime"))
    old_step = old.get("step")
    if then is None or now is None or old_step is None or step <= old_step or now <= then:
        return old.get("etaSeconds") if step == old_step else None  # no advance yet: the last estimate stands
    rate = (step - old_step) / (now - then).total_seconds()
    return round((total - step) / rate)


def duration(seconds: float) -> str:
    """1h02m, 4m05s, 12s: the way kubectl writes ages."""
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"
