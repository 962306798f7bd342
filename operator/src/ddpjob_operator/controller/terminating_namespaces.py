"""Keep watching a namespace while it is being deleted, until it is gone.

With --namespace (names or globs), kopf watches the matching namespaces only, and it drops a namespace from that
set as soon as its deletion begins: it never starts watching one that is already Terminating. But the namespace
controller deletes the pods first, and ours carry a tracking finalizer that only this operator removes: an
operator (re)started during a namespace's deletion would never see those pods, and the namespace would stay
Terminating for good. So a namespace counts as deleted only once it is really gone (its DELETED event, or its
absence from a relist: relist.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_installed = False


def gone(raw_event: Mapping[str, Any]) -> bool:
    return raw_event.get("type") == "DELETED"


def install() -> None:
    """Replace kopf's namespace-deletion test (idempotent). Must run before kopf starts observing namespaces."""
    global _installed
    if _installed:
        return
    from kopf._core.reactor import observation  # pinned kopf version in the lock; a unit test checks the hook

    observation.is_deleted = gone
    _installed = True
