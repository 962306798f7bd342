"""Which pods of earlier attempts a new group waits for, and the names its pods take (pure).

A new group used to wait until every pod of the old one was gone. That is right for a pod that may still run: on
a Ready node it holds GPUs the new group may be given, and pod names are reused across attempts. It is wrong for
a pod whose node is NotReady: nothing new lands there (the node is tainted unreachable), its ranks cannot reach the
new rendezvous (another id), yet termination.py rightly refuses to force-delete it for 300 s, since its containers
may still run. Waiting for it stalled every elastic job that lost a node for those 300 s.

So a new group waits only for old pods that are `in_the_way`. An old pod that is not, but still holds a name the
new group would use, leaves that name to it: the new pod takes `<name>-<attempt>` (hostname too, so the headless
Service's DNS, which keeps Terminating pods, never answers for the dead one). The rendezvous endpoint is the
hostname of the group's pod 0, whatever it is called."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import api
from ..recovery.failures import node_ready

HOSTNAME_MAX = 63  # a DNS label


def in_the_way(pod: dict[str, Any], nodes: dict[str, dict[str, Any]]) -> bool:
    """An old pod the new group must wait for: any pod not yet deleted, and a deleted one on a node that is Ready
    (its containers may still run there). A deleted pod on a NotReady or missing node, or on none, is not."""
    if not pod["metadata"].get("deletionTimestamp"):
        return True
    node = (pod.get("spec") or {}).get("nodeName")
    if not node:
        return False
    return node_ready(nodes.get(node))[0]


def free_name(job: str, index: int, attempt: int, held: set[str]) -> str:
    """The pod (and host) name of replica `index` in `attempt`: `<job>-worker-<index>` unless an old pod still
    holds it, then one that only this attempt uses, at most 63 characters (the CRD keeps job names <= 51)."""
    name = api.worker_name(job, index)
    if name not in held:
        return name
    # A replacement lost while its predecessor still Terminates holds `<name>-<attempt>` too: the next one takes
    # `<name>-<attempt>-2`, and so on (a held name met a 409 and stalled the job until the force-delete).
    for n in range(1, len(held) + 2):
        suffix = f"-{attempt}" if n == 1 else f"-{attempt}-{n}"
        longer = name + suffix if len(name + suffix) <= HOSTNAME_MAX else f"{job}-{index}{suffix}"[-HOSTNAME_MAX:]
        if longer not in held:
            return longer
    raise AssertionError("unreachable: more candidates than held names")


def host_of(pod: dict[str, Any]) -> str:
    return (pod.get("spec") or {}).get("hostname") or pod["metadata"]["name"]


def names_when_free(
    job: str,
    attempt: int,
    missing: Iterable[int],
    stale: list[dict[str, Any]],
    nodes: dict[str, dict[str, Any]],
    force_deleted: list[str],
) -> dict[int, str] | None:
    """The names of the missing pods, or None while an old pod is `in_the_way` (or force-deleted this pass: gone
    in a moment, its name with it)."""
    if any(in_the_way(p, nodes) or p["metadata"]["name"] in force_deleted for p in stale):
        return None
    held = {p["metadata"]["name"] for p in stale} | {host_of(p) for p in stale}
    return {index: free_name(job, index, attempt, held) for index in missing}
