"""How many pods of one job's shape the cluster can place now, and the size an elastic job should run at.

The count is an estimate from the watch cache: each Ready, schedulable node's allocatable resources, minus the
requests of the pods bound to it, divided by one worker pod's requests. It reads the resources the pod asks for,
the node's cordon, the taints the pod does not tolerate and the template's nodeSelector; not affinities, topology
spread or ports. It is the operator's proposal; the scheduler has the last
word, because each attempt is one gang (gang.py): a proposal that does not fit places nothing, and the job
then steps down (see decide_size). Pure functions: every rule is table-tested without a cluster."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from ..state.spec import JobSpec

Requests = dict[str, Decimal]

GROW = "GrewToFit"  # capacity returned: the group restarts bigger, from its checkpoint (not a failure)
SHRINK = "ShrankToFit"  # the gang cannot be placed at this size: the group restarts smaller (not a failure)


def pod_requests(pod_spec: Mapping[str, Any]) -> Requests:
    """What the scheduler counts for a pod: the sum of its containers' requests (a limit stands in for a missing
    request, as the API server defaults it), and the largest init container's if that is more."""

    def of(container: Mapping[str, Any]) -> Requests:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {name: parse_quantity(value) for name, value in merged.items()}

    total: Requests = {}
    for container in pod_spec.get("containers") or []:
        for name, value in of(container).items():
            total[name] = total.get(name, Decimal(0)) + value
    for container in pod_spec.get("initContainers") or []:
        for name, value in of(container).items():
            total[name] = max(total.get(name, Decimal(0)), value)
    return total


FIX = "fix the template and apply the job again"


def template_problem(template: Mapping[str, Any] | None) -> str | None:
    """The first field of a job's pod template the planner cannot read, named: a value of another type than
    Kubernetes gives it where the operator reads or copies it (labels, annotations, terminationGracePeriodSeconds,
    tolerations, nodeSelector), or a resource value that is no Kubernetes quantity; None when the template reads.
    The CRD refuses each at `kubectl apply`, but a DDPJob stored before its rule can still carry one: the planner
    fails that job (InvalidPodTemplate), and the capacity estimate leaves it out instead of failing on it."""
    if template is None:
        return None
    if not isinstance(template, Mapping):
        return f"spec.template: {template!r} is not an object (a pod template): {FIX}"
    meta = template.get("metadata") or {}
    if not isinstance(meta, Mapping):
        return f"spec.template.metadata: {meta!r} is not an object: {FIX}"
    for name in ("labels", "annotations"):
        if (problem := _string_map_problem(f"spec.template.metadata.{name}", meta.get(name))) is not None:
            return problem
    pod_spec = template.get("spec") or {}
    if not isinstance(pod_spec, Mapping):
        return f"spec.template.spec: {pod_spec!r} is not an object (a pod spec): {FIX}"
    grace = pod_spec.get("terminationGracePeriodSeconds")
    if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int) or grace < 0):
        return (
            f"spec.template.spec.terminationGracePeriodSeconds: {grace!r} is not a whole number of seconds "
            f"(such as 30, not '30s'): {FIX}"
        )
    tolerations = pod_spec.get("tolerations")
    if tolerations is not None and not (
        isinstance(tolerations, list) and all(isinstance(t, Mapping) for t in tolerations)
    ):
        return f"spec.template.spec.tolerations: {tolerations!r} is not a list of tolerations (objects): {FIX}"
    if (problem := _string_map_problem("spec.template.spec.nodeSelector", pod_spec.get("nodeSelector"))) is not None:
        return problem
    for kind in ("initContainers", "containers"):
        containers = pod_spec.get(kind) or []
        if not isinstance(containers, list) or not all(isinstance(c, Mapping) for c in containers):
            return f"spec.template.spec.{kind}: {containers!r} is not a list of containers (objects): {FIX}"
        for i, container in enumerate(containers):
            resources = container.get("resources") or {}
            for part in ("limits", "requests"):
                for name, value in (resources.get(part) or {}).items():
                    try:
                        parse_quantity(value)
                    except (TypeError, ValueError):
                        return (
                            f"spec.template.spec.{kind}[{i}].resources.{part}[{name}]: {value!r} is not a Kubernetes "
                            f"quantity (such as 2, 500m or 8Gi): {FIX}"
                        )
    return None


def _string_map_problem(field_path: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        return f"{field_path}: {value!r} is not a map of names to strings: {FIX}"
    for key, item in value.items():
        if not isinstance(item, str):
            return f"{field_path}[{key}]: {item!r} is not a string (quote it: '{item}'): {FIX}"
    return None


def slim_allocatable(allocatable: Mapping[str, Any] | None) -> Requests:
    return {name: parse_quantity(value) for name, value in (allocatable or {}).items()}


def _tolerated(taint: Mapping[str, Any], tolerations: Iterable[Mapping[str, Any]]) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t.get("key") == taint.get("key")):
            return True
        if t.get("key") == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


@dataclass(frozen=True)
class NodeRoom:
    name: str
    ready: bool
    unschedulable: bool
    taints: tuple[dict[str, Any], ...]
    allocatable: Requests
    labels: Mapping[str, str] = field(default_factory=dict)


def free_room(
    nodes: Iterable[NodeRoom], bound: Iterable[tuple[str, str, Requests]], own: set[str]
) -> dict[str, Requests]:
    """Per usable node: allocatable minus the requests of the pods bound to it, except the job's own pods
    (`own`: uids), whose room a restart at another size gives back."""
    used: dict[str, Requests] = {}
    for node_name, uid, requests in bound:
        if uid in own:
            continue
        slot = used.setdefault(node_name, {})
        for name, value in requests.items():
            slot[name] = slot.get(name, Decimal(0)) + value
    free: dict[str, Requests] = {}
    for node in nodes:
        taken = used.get(node.name, {})
        free[node.name] = {name: value - taken.get(name, Decimal(0)) for name, value in node.allocatable.items()}
    return free


def _fits(room: Requests, asked: Requests) -> bool:
    return all(room.get(r, Decimal(0)) >= v for r, v in asked.items())


def reserve(free: dict[str, Requests], reserved: Iterable[tuple[Requests, int]]) -> None:
    """Take the room of pods decided but not bound yet (another job's new attempt) out of `free`, first fit by
    node name: the scheduler's own "assumed pods", so two jobs never both count the same room."""
    for request, count in reserved:
        asked = {name: value for name, value in request.items() if value > 0}
        for name in sorted(free):
            room = free[name]
            while count > 0 and asked and _fits(room, asked):
                for r, v in asked.items():
                    room[r] = room.get(r, Decimal(0)) - v
                count -= 1
            if count <= 0:
                break


def usable(nodes: Iterable[NodeRoom], tolerations: Iterable[Mapping[str, Any]], selector: Mapping[str, str]) -> set:
    """Names of the nodes a pod with these tolerations and nodeSelector may land on."""
    tolerations = list(tolerations)
    return {
        n.name
        for n in nodes
        if n.ready
        and all(n.labels.get(k) == v for k, v in selector.items())
        and not n.unschedulable
        and all(_tolerated(t, tolerations) for t in n.taints if t.get("effect") in ("NoSchedule", "NoExecute"))
    }


def count_in(free: Mapping[str, Requests], request: Requests, reserved: Iterable[tuple[Requests, int]] = ()) -> int:
    """Pods asking `request` that the rooms in `free` hold once `reserved` is taken out (a pod asking nothing
    counts one per node). `free` is not changed."""
    rooms = {name: dict(room) for name, room in free.items()}
    reserve(rooms, reserved)
    asked = {name: value for name, value in request.items() if value > 0}
    count = 0
    for room in rooms.values():
        if not asked:
            count += 1
            continue
        count += int(max(Decimal(0), min(room.get(r, Decimal(0)) // v for r, v in asked.items())))
    return count


def pods_that_fit(
    nodes: Iterable[NodeRoom],
    bound: Iterable[tuple[str, str, Requests]],
    own: set[str],
    request: Requests,
    tolerations: Iterable[Mapping[str, Any]] = (),
    node_selector: Mapping[str, str] | None = None,
    reserved: Iterable[tuple[Requests, int]] = (),
) -> int:
    """How many more pods asking `request` the usable nodes hold (a pod asking nothing counts one per node), after
    the room `reserved` for other jobs' pods that are decided but not bound yet."""
    nodes = list(nodes)
    names = usable(nodes, tolerations, dict(node_selector or {}))
    return count_in(free_room([n for n in nodes if n.name in names], bound, own), request, reserved)


@dataclass(frozen=True)
class SizeDecision:
    size: int
    reason: str  # GROW or SHRINK
    message: str


def decide_size(
    *,
    desired: int,
    minimum: int,
    current: int,
    fits: int,
    unschedulable: bool,
) -> SizeDecision | None:
    """The size an elastic job at `current` pods should move to, or None to stay. `fits`: pods of its shape the
    cluster holds now, counting the room of its own pods; `unschedulable`: the scheduler said the current gang
    cannot be placed.

    - The gang is unschedulable: shrink to what fits, never below `minimum`. When the estimate says the current
      size fits but the scheduler disagrees (a constraint the estimate does not model), step down by one.
    - The group is placed and runs below `desired`: grow to what fits, up to `desired`.
    - Otherwise stay: a group is never restarted for capacity it cannot use."""
    if unschedulable and current > minimum:
        target = max(minimum, min(fits, current - 1) if fits >= current else fits)
        return SizeDecision(
            target,
            SHRINK,
            f"{current} pods cannot be placed together ({fits} fit now): continuing at {target} of {desired}",
        )
    if not unschedulable and current < desired and fits > current:
        target = min(desired, fits)
        return SizeDecision(target, GROW, f"room for {fits} pods: growing from {current} to {target} of {desired}")
    return None


def size_to_start(*, desired: int, minimum: int | None, fits: int | None) -> int:
    """The size of a new attempt: what fits, between the minimum and the desired size (a rigid job: desired)."""
    if minimum is None or fits is None:
        return desired
    return max(minimum, min(desired, fits))


def start_size(spec: JobSpec, capacity: int | None) -> int:
    """The size a new group starts at: the desired replicas, or for an elastic job what fits, not below its minimum."""
    return size_to_start(
        desired=spec.replicas, minimum=spec.elastic.min_replicas if spec.elastic else None, fits=capacity
    )
