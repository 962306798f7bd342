"""The relist layer: what a new listing lacks is deleted from the cache (relist.py)."""

import pytest

from ddpjob_operator.controller.relist import ListingTracker, tombstone


def obj(uid, name=None, **extra):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"uid": uid, "name": name or uid, "namespace": "ns", "labels": {"l": "v"},
                         "annotations": {"big": "x" * 100}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}, "status": {"phase": "Running"}, **extra}


def listing(tracker, *uids):
    for uid in uids:
        tracker.event({"type": None, "object": obj(uid)})
    return [e["object"]["metadata"]["uid"] for e in tracker.listing_over()]


@pytest.mark.parametrize("name, before, events, relisted, want_gone", [
    ("first listing: nothing gone", [], [], ["a", "b"], []),
    ("deleted during the gap", ["a", "b", "c"], [], ["a", "c"], ["b"]),
    ("empty relist: all gone", ["a", "b"], [], [], ["a", "b"]),
    ("watched DELETED is not reported twice", ["a", "b"], [("DELETED", "b")], ["a"], []),
    ("added by the watch, gone in the gap", ["a"], [("ADDED", "n")], ["a"], ["n"]),
    ("re-created under its name: the old uid goes", ["old"], [], ["new"], ["old"]),
])
def test_a_relist_deletes_exactly_what_the_new_list_lacks(name, before, events, relisted, want_gone):
    tracker = ListingTracker()
    assert listing(tracker, *before) == []
    for kind, uid in events:
        tracker.event({"type": kind, "object": obj(uid)})
    assert sorted(listing(tracker, *relisted)) == want_gone, name
    # and only once: a second identical listing finds nothing more
    assert listing(tracker, *relisted) == [], name


def test_a_ghost_event_carries_what_the_indexes_and_handlers_read():
    tracker = ListingTracker()
    listing(tracker, "a")
    ghost = tracker.listing_over()[0]
    assert ghost["type"] == "DELETED"
    assert ghost["object"] == tombstone(obj("a"))
    assert ghost["object"]["metadata"] == {"uid": "a", "name": "a", "namespace": "ns", "labels": {"l": "v"}}
    assert (ghost["object"]["spec"], ghost["object"]["status"]) == ({"nodeName": "n1"}, {"phase": "Running"})


def test_objects_without_uid_such_as_bookmarks_are_ignored():
    tracker = ListingTracker()
    tracker.event({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}})
    assert tracker.known == {}


def test_the_layer_wraps_the_pinned_kopf_stream():
    """install() replaces kopf's infinite_watch, which kopf's watcher calls by its module name, and which relists
    through continuous_watch: if a kopf upgrade moves either, this fails instead of ghosts coming back silently."""
    import inspect

    from kopf._cogs.clients import watching
    from kopf._core.reactor import queueing

    from ddpjob_operator.controller import relist

    assert "continuous_watch(" in inspect.getsource(watching.infinite_watch)
    assert "yield Bookmark.LISTED" in inspect.getsource(watching.continuous_watch)
    assert "watching.infinite_watch(" in inspect.getsource(queueing.watcher)
    relist.install()
    assert watching.infinite_watch.__module__ == relist.__name__


def test_the_patched_kopf_is_the_locked_one():
    """The hook above and those of test_kopf_namespaces.py replace kopf internals: the kopf they were checked against
    is the one the hashed lock pins, so an upgrade is a deliberate `make lock` that runs these tests first."""
    import re
    from importlib.metadata import version
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    locked = re.search(r"^kopf==(\S+)", (root / "hack" / "requirements.lock").read_text(), re.M).group(1)
    assert version("kopf") == locked
