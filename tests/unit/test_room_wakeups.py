"""Freed room is offered to the waiting elastic jobs one at a time, oldest first (room_wakeups.py)."""

from ddpjob_operator.room_wakeups import STALE_TURN_SECONDS, RoomRounds

AGE = {("ns", "old"): "2026-01-01T00:00:00Z", ("ns", "mid"): "2026-01-02T00:00:00Z",
       ("ns", "new"): "2026-01-03T00:00:00Z"}
OLD, MID, NEW = ("ns", "old"), ("ns", "mid"), ("ns", "new")


def rounds(clock=lambda: 0.0):
    return RoomRounds(lambda k: AGE.get(k, ""), clock)


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
