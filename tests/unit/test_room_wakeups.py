"""Freed room is offered to the waiting elastic jobs one at a time, highest priority then oldest first
(room_wakeups.py)."""

from ddpjob_operator.placement.room_wakeups import STALE_TURN_SECONDS, RoomRounds, turn_order
from ddpjob_operator.controller.watch_cache import WatchCache, priority_entry

AGE = {("ns", "old"): "2026-01-01T00:00:00Z", ("ns", "mid"): "2026-01-02T00:00:00Z",
       ("ns", "new"): "2026-01-03T00:00:00Z"}
OLD, MID, NEW = ("ns", "old"), ("ns", "mid"), ("ns", "new")


def rounds(clock=lambda: 0.0, priority=None):
    return RoomRounds(lambda k: turn_order((priority or {}).get(k, 0), AGE.get(k, "")), clock)


def test_one_at_a_time_oldest_first():
    r = rounds()
    waiting = {NEW, OLD, MID}
    assert r.room_freed(waiting) == OLD
    assert r.room_freed(waiting) is None, "a round is under way: no second job is woken"
    assert r.pass_done(MID, waiting) is None, "only the job whose turn it is moves the round on"
    assert r.pass_done(OLD, waiting - {OLD}) == MID  # OLD grew into the room: no longer waiting
    assert r.pass_done(MID, waiting) == NEW
    assert r.pass_done(NEW, waiting) == OLD, "an event came during the round: one more round follows"
    assert r.pass_done(OLD, waiting) == MID
    assert r.pass_done(MID, waiting) == NEW
    assert r.pass_done(NEW, waiting) is None
    assert r.room_freed(waiting) == OLD, "a new event starts a new round"


def test_a_job_that_stopped_waiting_is_skipped():
    r = rounds()
    assert r.room_freed({OLD, MID}) == OLD
    assert r.pass_done(OLD, {NEW}) is None  # MID was deleted meanwhile, NEW came after the round began


def test_a_stale_turn_does_not_stall_the_rounds():
    now = [0.0]
    r = rounds(lambda: now[0])
    assert r.room_freed({OLD, MID}) == OLD
    now[0] += STALE_TURN_SECONDS + 1
    assert r.room_freed({OLD, MID}) == OLD, "the stale round is dropped: a new one starts"


def test_a_higher_priority_job_looks_first_whatever_its_age():
    r = rounds(priority={NEW: 1000, MID: 1000, OLD: -5})
    waiting = {NEW, OLD, MID}
    assert r.room_freed(waiting) == MID, "the older of the two high-priority jobs"
    assert r.pass_done(MID, waiting) == NEW
    assert r.pass_done(NEW, waiting) == OLD, "a negative priority comes after the default 0"


def test_the_cache_resolves_a_jobs_priority_as_the_api_server_does():
    def job(priority_class=None):
        spec = {"priorityClassName": priority_class} if priority_class else {}
        return {"metadata": {"name": "a"}, "spec": {"template": {"spec": spec}}}

    classes = {"high": [priority_entry({"value": 1000})], "batch": [priority_entry({"value": 10})]}
    cache = WatchCache(jobs={}, pods={}, nodes={}, children=[], priorities=classes)
    assert (cache.priority(job("high")), cache.priority(job()), cache.priority(job("missing"))) == (1000, 0, 0)
    classes["batch"] = [priority_entry({"value": 10, "globalDefault": True})]
    assert cache.priority(job()) == 10, "no class named: the cluster's globalDefault class"
    assert cache.priority(job("high")) == 1000


def test_only_the_job_whose_turn_it_is_may_grow():
    r = rounds(priority={NEW: 1000})
    assert not any(r.may_grow(k) for k in (OLD, MID, NEW)), "no round: nobody grows (a pass that sees room starts one)"
    assert r.room_freed({OLD, NEW}) == NEW
    assert r.may_grow(NEW) and not r.may_grow(OLD)
    assert r.pass_done(NEW, {OLD}) == OLD
    assert r.may_grow(OLD) and not r.may_grow(NEW)
