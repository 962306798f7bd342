"""Whether the scheduler really gang-schedules, not only whether the API server serves PodGroups (pure).

An API server can serve `scheduling.k8s.io/v1alpha2` while the scheduler runs without the `GangScheduling` gate
(or another scheduler binds the pods): the PodGroup is then a dead letter, the pods are placed one by one, and a
status that said `Gang` would be a lie. The scheduler's own word settles it. A gang scheduler writes the
`PodGroupScheduled` condition on each PodGroup it works on (True when it placed the gang, False with its reason
when it could not), in the same cycle that binds the pods. So:

- a PodGroup of ours with a `PodGroupScheduled` condition: the scheduler gang-schedules (enforced);
- a pod of an attempt bound `SILENCE_SECONDS` after the binding with its PodGroup (created before the binding)
  still without that condition: the scheduler placed it without looking at the gang (not enforced);
- otherwise: no evidence yet (nothing bound, or bound too recently).

The watch cache keeps the latest evidence for the whole cluster (watch_cache.WatchCache.gang_evidence), learned
by a reconcile pass's own step (learn_gang, before the read-only observe). Once it
says "not enforced", new attempts are placed pod by pod (`status.placement: PodByPod`, so the placement timeout
applies: placement_timeout.py) and get no PodGroup; the operator says so once in its log and with a
`GangNotEnforced` event on the job that showed it. A restarted operator starts from "no evidence" and learns it
again from the first attempt that shows it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..timefmt import parse_time
from . import gang

SILENCE_SECONDS = 15.0
NOT_ENFORCED = "GangNotEnforced"  # event reason


@dataclass(frozen=True)
class Evidence:
    enforced: bool
    message: str = ""


def _bound_at(pod: Mapping[str, Any]) -> datetime | None:
    if not (pod.get("spec") or {}).get("nodeName"):
        return None
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            return parse_time(cond.get("lastTransitionTime"))
    return None


def evidence(podgroup: Mapping[str, Any] | None, pods: Iterable[Mapping[str, Any]], now: datetime) -> Evidence | None:
    """What one attempt's PodGroup and pods say about the scheduler, or None when they say nothing yet."""
    if podgroup is None:
        return None
    if gang.verdict(podgroup).scheduled is not None:
        return Evidence(True)
    created = parse_time((podgroup.get("metadata") or {}).get("creationTimestamp"))
    if created is None:
        return None
    for pod in pods:
        bound = _bound_at(pod)
        if bound is None or bound < created:
            continue  # a PodGroup re-created under pods already bound is never scheduled again: no evidence
        silent = (now - bound).total_seconds()
        if silent >= SILENCE_SECONDS:
            return Evidence(
                False,
                f"pod {pod['metadata']['name']} was bound {silent:.0f}s ago and the scheduler never wrote "
                f"{gang.SCHEDULED} on PodGroup {podgroup['metadata']['name']}: it does not gang-schedule "
                "(its GangScheduling feature gate is off?); placing new attempts pod by pod",
            )
    return None
