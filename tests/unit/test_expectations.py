"""Expectations: a write the watch cache has not shown yet holds the job's next pass, until it shows or times out."""

from __future__ import annotations

import pytest

from ddpjob_operator.controller.expectations import Expectations, view_of

FIN = "ddpjob.dev/pod-tracking"
KEY = ("ns", "a")


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def pod(uid, deleting=False, finalizers=(FIN,)):
    meta = {"uid": uid, "name": f"p-{uid}", "finalizers": list(finalizers)}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


def job(rv):
    return {"metadata": {"resourceVersion": rv}}


def view(rv="5", pods=(), kinds=()):
    return view_of(job(rv) if rv else None, list(pods), kinds, FIN)


@pytest.mark.parametrize("name, record, cache, want_ready", [
    ("nothing outstanding", lambda e: None, view(), True),
    ("a create not yet observed blocks (no second create)", lambda e: e.created_pod(KEY, "u1"), view(), False),
    ("a create observed releases", lambda e: e.created_pod(KEY, "u1"), view(pods=[pod("u1")]), True),
    ("a create observed already Terminating releases (the pass counts the failure)",
     lambda e: e.created_pod(KEY, "u1"), view(pods=[pod("u1", deleting=True)]), True),
    ("a delete not yet observed blocks (no 'missing' verdict, no second delete)",
     lambda e: e.deleted_pod(KEY, "u1"), view(pods=[pod("u1")]), False),
    ("a delete observed as Terminating releases", lambda e: e.deleted_pod(KEY, "u1"),
     view(pods=[pod("u1", deleting=True)]), True),
    ("a delete observed as gone releases", lambda e: e.deleted_pod(KEY, "u1"), view(), True),
    ("a finalizer release not yet observed blocks", lambda e: e.released_pod(KEY, "u1"), view(pods=[pod("u1")]),
     False),
    ("a finalizer release observed releases", lambda e: e.released_pod(KEY, "u1"),
     view(pods=[pod("u1", finalizers=())]), True),
    ("a Service create not yet observed blocks", lambda e: e.created_child(KEY, "Service"), view(), False),
    ("a Service create observed releases", lambda e: e.created_child(KEY, "Service"), view(kinds=["Service"]), True),
    ("a status write not yet observed blocks", lambda e: e.wrote_status(KEY, "5"), view(rv="5"), False),
    ("a status write observed releases", lambda e: e.wrote_status(KEY, "5"), view(rv="6"), True),
    ("a job gone from the cache releases", lambda e: e.wrote_status(KEY, "5"), view(rv=None), True),
    ("another job's expectation does not block", lambda e: e.created_pod(("ns", "b"), "u1"), view(), True),
])
def test_satisfied(name, record, cache, want_ready):
    e = Expectations(Clock(), timeout_seconds=30)
    record(e)
    ready, _ = e.satisfied(KEY, cache)
    assert ready is want_ready, name


def test_timeout_releases_both_create_and_delete_and_says_how_long_is_left():
    clock = Clock()
    e = Expectations(clock, timeout_seconds=30)
    e.created_pod(KEY, "u1")
    e.deleted_pod(KEY, "u2")
    clock.now += 10
    assert e.satisfied(KEY, view(pods=[pod("u2")])) == (False, 20.0)
    clock.now += 20
    assert e.satisfied(KEY, view(pods=[pod("u2")])) == (True, 0.0)
    assert e.outstanding(KEY) is None, "a timed-out expectation is dropped, not kept for the next pass"


def test_partly_observed_keeps_only_what_is_still_missing():
    e = Expectations(Clock(), timeout_seconds=30)
    e.created_pod(KEY, "u1")
    e.created_pod(KEY, "u2")
    assert e.satisfied(KEY, view(pods=[pod("u1")]))[0] is False
    assert e.outstanding(KEY).created_pods == {"u2"}
    assert e.satisfied(KEY, view(pods=[pod("u1"), pod("u2")]))[0] is True


def test_new_expectations_after_a_satisfied_one_start_a_new_timeout():
    clock = Clock()
    e = Expectations(clock, timeout_seconds=30)
    e.created_pod(KEY, "u1")
    assert e.satisfied(KEY, view(pods=[pod("u1")]))[0]
    clock.now += 100
    e.deleted_pod(KEY, "u1")
    assert e.satisfied(KEY, view(pods=[pod("u1")])) == (False, 30.0)


def test_forget_drops_a_deleted_jobs_expectations():
    e = Expectations(Clock())
    e.created_pod(KEY, "u1")
    e.forget(KEY)
    assert e.satisfied(KEY, view())[0] is True
