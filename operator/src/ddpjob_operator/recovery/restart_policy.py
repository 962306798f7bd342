"""The failure policy: given a failure of the current attempt, restart the whole group or fail the job."""

from __future__ import annotations

from dataclasses import dataclass

from ..state.spec import RunPolicy
from . import failures as f
from .failure_class import PLATFORM, TRAINER, class_of

RESTART = "Restart"
FAIL = "Fail"

BACKOFF_CAP_SECONDS = 300


@dataclass(frozen=True)
class RestartBudget:
    """Whole-group restarts allowed (runPolicy.backoffLimit) and already used (status.restarts)."""

    limit: int
    used: int

    @property
    def exhausted(self) -> bool:
        return self.used >= self.limit


@dataclass(frozen=True)
class RestartDecision:
    action: str
    reason: str
    message: str


def permanent_under_exit_code(failure: f.Failure) -> bool:
    """ExitCode policy: 1-127 is the program's own verdict (a bug, bad config); 128+, signals and
    infrastructure failures (eviction, deletion, a lost node) are worth retrying."""
    return failure.kind == f.EXIT_CODE and failure.exit_code is not None and 1 <= failure.exit_code <= 127


def decide_restart(
    policy: str, failure: f.Failure, budget: RestartBudget, platform: RestartBudget | None = None
) -> RestartDecision:
    """`budget` is the trainer's (backoffLimit); `platform` the platform's (platformFailureLimit), spent instead
    by a failure of the platform class (failure_class.py). Without it every failure spends `budget`."""
    cause = failure.describe()
    if policy == "Never":
        return RestartDecision(FAIL, "PodFailed", f"{cause}; restartPolicy is Never")
    if policy == "ExitCode" and permanent_under_exit_code(failure):
        return RestartDecision(
            FAIL, "PermanentExitCode", f"{cause}; exit codes 1-127 are permanent under restartPolicy ExitCode"
        )
    if platform is not None and class_of(failure) == PLATFORM:
        if platform.exhausted:
            return RestartDecision(
                FAIL,
                "PlatformFailureLimitExceeded",
                f"{cause}; platformFailureLimit {platform.limit} reached after {platform.used} platform failures",
            )
        return RestartDecision(
            RESTART,
            failure.kind,
            f"{cause}; restarting the group (platform failure {platform.used + 1}/{platform.limit}; "
            f"backoffLimit untouched)",
        )
    # ExitCode's retryable failures spend the same budget as OnFailure (kubeflow #2045 let them loop forever).
    if budget.exhausted:
        return RestartDecision(
            FAIL, "BackoffLimitExceeded", f"{cause}; backoffLimit {budget.limit} reached after {budget.used} restarts"
        )
    return RestartDecision(RESTART, failure.kind, f"{cause}; restarting the group ({budget.used + 1}/{budget.limit})")


def backoff_seconds(base: int, restarts: int) -> int:
    """Delay before the attempt that follows the restarts-th restart: base x 2^(restarts-1), capped."""
    if base <= 0 or restarts <= 0:
        return 0
    return min(BACKOFF_CAP_SECONDS, base * 2 ** min(restarts - 1, 16))


def decide_each(
    policy: str, run: RunPolicy, found: list[f.Failure], trainer_used: int, platform_used: int
) -> RestartDecision | None:
    """Several failures seen in one pass (TorchFT replica groups lost at once, each replaced alone): those of one
    class are one incident of it (a common-mode crash, a rack's power), spending one unit of its budget
    (replace_pod.replace_alone). Each failure is checked against its class's budget; the first that does not fit
    decides (None: all fit)."""
    used = {TRAINER: trainer_used, PLATFORM: platform_used}
    for failure in found:
        budget = RestartBudget(limit=run.backoff_limit, used=used[TRAINER])
        platform = RestartBudget(limit=run.platform_failure_limit, used=used[PLATFORM])
        decision = decide_restart(policy, failure, budget, platform)
        if decision.action != RESTART:
            return decision
    return None
