"""Restarts done in place (runPolicy.restartStrategy: InPlace), counted into the job's budget (pure).

Under InPlace a failed trainer process does not end its pod: torchrun's agents restart their workers inside the
running pods and form the group again (PET_MAX_RESTARTS, rendezvous.max_restarts). The operator sees no pod end,
so it counts those restarts from what reports them:
- worker 0's `ddp_trainer_torchrun_restarts` (its agent's TORCHELASTIC_RESTART_COUNT; a peer's failure fails
  worker 0's collectives too, so its agent restarts with the others), read with the progress scrape;
- the termination record of a pod whose agent gave up (`ddpjobInPlaceRestarts`, ddp_trainer.torchrun), which
  also covers a script that serves no metrics.
torchrun's limit is what was left of backoffLimit when the pod was made, so its counter is the job's budget, never
a second one: when it is spent the pod fails, and the failure policy finds the budget spent.

Under faultTolerance TorchFT with InPlace each pod is a replica group, a standalone torchrun: its agent restarts only
its own processes, which heal from a live group while the others train on. The agents' counts are then summed, and
no replacement's join is expected (a replaced group joins no other pod's rendezvous)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

from .. import api
from ..state.plan import Observed, Plan
from ..state.spec import IN_PLACE, JobSpec
from ..state.status import InPlace, JobStatus, LastFailure
from ..timefmt import format_time, parse_time
from . import failure_class, failures, recoveries

# After a replacement pod runs, its agent joins the survivors' rendezvous and they restart their workers to take
# it in. torchrun does not count that as a failure, but the trainer's stop vote can: the first agent to see the
# newcomer stops its workers with SIGTERM, they vote stop, and a peer that has not seen the newcomer yet exits 143
# on its own, which its agent counts as a failed worker. Restarts reported within this window after the
# replacement runs are the incident's, not the trainer's: counted as seen, charged to no budget. That includes the
# survivors' restarts for the loss itself that a lagging read shows only now (found by the simulation, tests/sim:
# an eviction's three restarts read after the replacement ran were charged to the trainer). A genuine failure
# inside the window goes uncharged; a trainer that keeps failing is charged from the window's end.
JOIN_WINDOW = timedelta(seconds=120)
LATE_JOIN = JOIN_WINDOW  # how long past its end a join first seen late is still taken for the join
JOINED = "torchrun restarted the workers to take the replacement pod into the group: not a failure, no budget spent"


def expect_join(status: JobStatus, now: datetime) -> None:
    """The replacement runs: open the window in which one reported restart is its join (replace_pod.done)."""
    status["inPlace"] = {
        **agents_seen(status),  # type: ignore[typeddict-item]
        "attempt": status["attempt"],
        "restarts": counted(status),
        "joinUntil": format_time(now + JOIN_WINDOW),
    }


def agents_seen(status: JobStatus) -> dict[str, Any]:
    """The agents' counts already recorded for the current attempt (agent_record), to carry into a new record."""
    seen: dict[str, Any] = dict(status.get("inPlace") or {})
    if seen.get("attempt") != status.get("attempt"):
        return {}
    return {k: seen[k] for k in ("pods", "offsets", "agentTotal") if k in seen}


def counted(status: JobStatus) -> int:
    """In-place restarts of the current attempt already in status.restarts."""
    seen = status.get("inPlace") or {}
    return int(seen.get("restarts", 0)) if seen.get("attempt") == status.get("attempt") else 0


def reported(obs: Observed, ended: list[int], scraped: bool = True) -> int:
    """The most in-place restarts anything of the current attempt reports: worker 0's scrape, and the termination
    records of its pods that ended (`ended`). (Under TorchFT the scrape and a record are each one group's count,
    at most the agents' sum, agent_record.)"""
    count = (obs.progress or {}).get("inPlaceRestarts") if scraped else None
    most = count if isinstance(count, int) else 0
    return max([most, *ended])


def join_window(status: JobStatus) -> datetime | None:
    """The end of the open join window, if it belongs to the current attempt."""
    seen = status.get("inPlace") or {}
    return parse_time(seen.get("joinUntil")) if seen.get("attempt") == status.get("attempt") else None


def _window_open(obs: Observed, join_until: datetime, new: int) -> bool:
    """Whether one restart seen now may still be the join. Past its end the window stays open until a scrape taken
    after the end has shown no new restart, for at most LATE_JOIN more: a join that happened inside the window but
    was first seen later (the operator down, a scrape gap) is still the join. With no scrape, its time ends it."""
    if obs.now <= join_until:
        return True
    if obs.now > join_until + LATE_JOIN:
        return False
    scraped_at = parse_time((obs.progress or {}).get("updateTime"))
    if scraped_at is None:
        return False
    return new > 0 or scraped_at <= join_until


def agent_record(obs: Observed, status: JobStatus, independent: bool = False) -> dict[str, Any]:
    """The agents' side of status.inPlace after this pass's read: `pods` (uid -> the largest count seen, its
    baseline for the next read) and `agentTotal`, the group restarts they showed so far in the attempt.

    Under plain InPlace one group failure makes one or more agents count (the failed worker's always; a peer's
    too when its workers failed with it before it saw a membership change), and each agent's count is cumulative
    since the agent began: the group's restarts are the largest count of any one agent, a replacement's counted
    from the group's total when it was first read (`offsets`), however the agents' increases fall over the reads
    (summing each read's largest increase counted one failure twice when two agents were read in two passes).
    `independent` (TorchFT's replica groups, a standalone torchrun each: a group's loss fails no other group's
    processes): every agent counts only its own failures, so the increases of all pods add up."""
    seen = status.get("inPlace") or {}
    same = seen.get("attempt") == status.get("attempt")
    pods: dict[str, int] = dict(seen.get("pods") or {}) if same else {}
    offsets: dict[str, int] = dict(seen.get("offsets") or {}) if same else {}
    total = int(seen.get("agentTotal", 0)) if same else 0
    counts = obs.agent_restarts
    if counts:
        live = {p["metadata"].get("uid"): p for p in obs.pods}
        if independent:
            total += sum(max(0, n - pods.get(uid, 0)) for uid, n in counts.items())
        else:
            first = _attempt_began(obs, status)
            for uid in counts:
                if uid not in pods and uid in live and _joined_later(live[uid], first):
                    offsets[uid] = total  # a replacement's agent began at 0 after the group's restarts so far
            total = max(total, *(offsets.get(uid, 0) + n for uid, n in counts.items()))
        pods = {uid: max(n, pods.get(uid, 0)) for uid, n in {**pods, **counts}.items() if uid in live}
        offsets = {uid: n for uid, n in offsets.items() if uid in live}
    out: dict[str, Any] = {}
    if pods:
        out["pods"] = pods
    if offsets:
        out["offsets"] = offsets
    if total:
        out["agentTotal"] = total
    return out


# The attempt's pods are created in one pass; a pod created this much after the attempt's first is a replacement
# (replace_pod). Where the attempt's first pods are gone, none is taken for one: that undercounts, never charges a
# restart that did not happen.
LATER_POD_SECONDS = 30.0


def _attempt_began(obs: Observed, status: JobStatus) -> datetime | None:
    attempt = str(status.get("attempt", 0))
    made = [
        parse_time(p["metadata"].get("creationTimestamp"))
        for p in obs.pods
        if (p["metadata"].get("labels") or {}).get(api.LABEL_ATTEMPT) == attempt
    ]
    return min((t for t in made if t is not None), default=None)


def _joined_later(pod: dict[str, Any], first: datetime | None) -> bool:
    created = parse_time(pod["metadata"].get("creationTimestamp"))
    return created is not None and first is not None and (created - first).total_seconds() > LATER_POD_SECONDS


# An increase of the agents' counts while an agent of the attempt does not answer may be that pod's loss (a node
# rebooting: its peers' collectives fail at once, while the API shows it Running on a Ready node until the node
# monitor's grace ends). It is held, at most this long, for the loss to show; the failure policy then charges it to
# the platform, once. An agent that stays silent longer (an image without the endpoint) holds nothing past it.
HOLD_MAX = timedelta(seconds=300)


def _held(obs: Observed, status: JobStatus, plan: Plan) -> bool:
    """Whether this pass's new restarts wait (an agent of a running pod of the attempt is silent); records when the
    wait began, and looks again when it ends."""
    silent = [
        p
        for p in obs.pods
        if p["metadata"].get("uid") in obs.agents_silent
        and (p.get("status") or {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    ]
    seen: dict[str, Any] = dict(status.get("inPlace") or {})
    if not silent or not obs.agent_restarts:
        return False  # no agent ever answered (an image without the endpoint): silence says nothing
    since = parse_time(seen.get("heldSince")) if seen.get("attempt") == status.get("attempt") else None
    if since is None:
        since = obs.now
        status["inPlace"] = cast(InPlace, {**seen, "attempt": status["attempt"], "heldSince": format_time(since)})
    left = (since + HOLD_MAX - obs.now).total_seconds()
    if left <= 0:
        return False
    plan.requeue(min(left, 10.0))
    return True


def take_in(
    obs: Observed,
    spec: JobSpec,
    status: JobStatus,
    plan: Plan,
    ended: list[int] | None = None,
    scraped: bool = True,
) -> int:
    """Count in-place restarts not yet counted into status.restarts (a Warning event and a recovery entry each
    time); how many were new. `ended`: what the termination records of the attempt's ended pods say; `scraped`:
    False leaves this pass's reads out (a pod lost in this pass: the survivors' restart for it is the
    replacement's, replace_pod.replace), and keeps the baselines read before.

    Restarts seen while a lost pod is being replaced alone (status.replacing) are that platform incident's (the
    survivors restart for the loss, and again while the group re-forms): counted as seen, charged to no budget. In
    the join window after it, restarts are the incident's too (JOIN_WINDOW). An increase seen while an agent of the
    attempt is silent is held for the loss to show (HOLD_MAX)."""
    if spec.run_policy.restart_strategy != IN_PLACE:
        return 0
    independent = spec.fault_tolerance.torchft
    before = counted(status)
    agents = agent_record(obs, status, independent=independent) if scraped else agents_seen(status)
    new = max(reported(obs, ended or [], scraped), agents.get("agentTotal", 0)) - before
    join_until = join_window(status)

    def record(restarts: int) -> None:
        status["inPlace"] = cast(InPlace, {"attempt": status["attempt"], "restarts": restarts, **agents})

    if (status.get("inPlace") or {}).get("joinUntil") and join_until is None:
        record(before)  # an earlier attempt's window
    if new > 0 and status.get("replacing") and not independent:
        record(before + new)  # the loss being replaced is the cause: its incident, charged once (replace_pod)
        return 0
    window_open = join_until is not None and _window_open(obs, join_until, new)
    if join_until is not None and new > 0 and window_open:
        record(before + new)
        status["inPlace"]["joinUntil"] = format_time(join_until)  # open until its end: a lagging read may follow
        plan.event("Normal", "ReplacementJoined", JOINED)
        return 0
    if join_until is not None and not window_open:
        record(before)  # the window is over
    if new > 0 and not independent and _held(obs, status, plan):
        return 0
    if new > 0:
        _, was_reset = failure_class.counts_before(status, obs.now, spec.run_policy.healthy_reset_seconds)
        if was_reset:  # a healthy stretch ended: both budgets start over, as for any other failure
            status.update({"restarts": 0, "platformRestarts": 0})
    if new <= 0:
        held = (status.get("inPlace") or {}).get("heldSince")
        if held or (agents and {k: v for k, v in (status.get("inPlace") or {}).items() if k in agents} != agents):
            if join_until is None or not window_open:
                record(before)  # the agents' counts moved, all of it already counted (or a hold is over)
            else:
                status["inPlace"] = cast(InPlace, {**(status.get("inPlace") or {}), **agents})
        return 0
    status["restarts"] = status.get("restarts", 0) + new
    record(before + new)
    limit = spec.run_policy.backoff_limit
    message = (
        f"trainer processes restarted in place by torchrun ({before + new} in attempt {status['attempt']}); "
        f"restarts {status['restarts']} of backoffLimit {limit}; no pod was replaced"
    )
    plan.event("Warning", "RestartedInPlace", message)
    plan.observe("in_place_restarts", new)
    recoveries.record(
        status, obs.now, recoveries.IN_PLACE, cause=None, message=message, done=True, scraped=obs.progress
    )
    return new


def budget_spent(obs: Observed, spec: JobSpec, status: JobStatus) -> tuple[str, str, LastFailure] | None:
    """The operator's count decides, not torchrun's (rendezvous.max_restarts): restarts in place past backoffLimit
    fail the job (after a healthy stretch take_in reset them first: failure_class.py). (reason, message, the last
    failure) to fail with, or None."""
    limit = spec.run_policy.backoff_limit
    if spec.run_policy.restart_strategy != IN_PLACE or status.get("restarts", 0) <= limit:
        return None
    message = (
        f"trainer processes restarted in place {status['restarts']} times; backoffLimit {limit} reached after "
        f"{limit} restarts"
    )
    last: LastFailure = {
        "pod": api.worker_name(obs.job["metadata"]["name"], 0),
        "kind": failures.UNKNOWN,
        "failureClass": failure_class.TRAINER,
        "reason": "RestartedInPlace",
        "message": message,
        "time": format_time(obs.now),
    }
    return "BackoffLimitExceeded", message, last
