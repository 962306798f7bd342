"""The contracts about our children, each written once (pure): who controls an object, whether a pod carries our
tracking finalizer, and the patch that frees it. The watch cache reads plain dicts and the API client returns its
model objects; both go through here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .. import api


def _field(ref: Any, camel: str, snake: str) -> Any:
    return ref.get(camel) if isinstance(ref, Mapping) else getattr(ref, snake, None)


def controller(refs: Iterable[Any] | None) -> Any | None:
    """The controller's ownerReference (a dict or a V1OwnerReference), if any."""
    return next((r for r in refs or [] if _field(r, "controller", "controller")), None)


def controller_uid(refs: Iterable[Any] | None) -> str | None:
    ref = controller(refs)
    return None if ref is None else _field(ref, "uid", "uid")


def controlled_by(refs: Iterable[Any] | None, uid: str) -> bool:
    return controller_uid(refs) == uid


def ddpjob_controlled(refs: Iterable[Any] | None) -> bool:
    """Controlled by some DDPJob (ours, or an earlier one of the same name)."""
    ref = controller(refs)
    return (
        ref is not None
        and _field(ref, "kind", "kind") == api.KIND
        and str(_field(ref, "apiVersion", "api_version") or "").startswith(api.GROUP + "/")
    )


def describe_controller(refs: Iterable[Any] | None) -> str:
    ref = controller(refs)
    if ref is None:
        return "no controller"
    return f"{_field(ref, 'kind', 'kind')} {_field(ref, 'name', 'name')} (uid {_field(ref, 'uid', 'uid')})"


def tracked(finalizers: Iterable[str] | None) -> bool:
    """The object (a dict's metadata.finalizers or a model's) carries our tracking finalizer."""
    return api.TRACKING_FINALIZER in (finalizers or [])


def release_patch(uid: str, finalizers: list[str] | None) -> list[dict[str, Any]] | None:
    """The JSON patch that drops our tracking finalizer: it first tests the uid (never a newer pod that reuses the
    name) and that our entry is where it was seen, so a changed pod is refused (422) instead of patched. None
    when the pod does not carry it."""
    finalizers = finalizers or []
    if not tracked(finalizers):
        return None
    where = f"/metadata/finalizers/{finalizers.index(api.TRACKING_FINALIZER)}"
    return [
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "test", "path": where, "value": api.TRACKING_FINALIZER},
        {"op": "remove", "path": where},
    ]
