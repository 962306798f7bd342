"""Who gets to look at freed room first (pure bookkeeping).

When a pod leaves a node, every elastic job below its size could grow into that room. Woken all at once, they
would all decide to grow, all restart, and all but one would find the room taken and shrink back. So a room event
starts a *round*: the waiting jobs are woken one at a time, in the order the scheduler itself would favour them:
the highest priority first (the value of the PriorityClass its pods name, or of the cluster's globalDefault class,
else 0), then the oldest (`metadata.creationTimestamp`), then by namespace and name. Each next one is woken only
after the previous one's pass is over and a moment has passed for its decision to reach the cache, where it then
counts as reserved room (watch_cache.WatchCache.reserved). Room events during a round are folded into one more round.

A job's own pass (its pods' events, the resync) may find room too. It never grows there: only the job whose turn it
is may grow (`may_grow`); a pass that found room outside its turn starts a round instead (reconciler.py), so the
room goes to the waiting jobs in the order above, whoever saw it first."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

Key = tuple[str, str]
Order = tuple[int, str]  # turn_order(): sorts the first turn first
# A turn whose pass never reported back (it cannot happen short of a bug, but a round must not stall for good).
STALE_TURN_SECONDS = 30.0


def turn_order(priority: int, created: str) -> Order:
    """Higher priority first, then older (RFC 3339 creation times sort as text; "" when unknown sorts first)."""
    return (-priority, created)


class RoomRounds:
    def __init__(self, order_of: Callable[[Key], Order], clock: Callable[[], float] = time.monotonic):
        self.order_of = order_of
        self.clock = clock
        self.order: list[Key] = []
        self.turn: Key | None = None
        self.turn_since = 0.0
        self.again = False  # a room event arrived during the round

    def room_freed(self, waiting: Iterable[Key]) -> Key | None:
        """A room event: the key to wake now, or None (a round is under way; one more follows it)."""
        if self.turn is not None and self.clock() - self.turn_since < STALE_TURN_SECONDS:
            self.again = True
            return None
        self.order = sorted(waiting, key=lambda k: (self.order_of(k), k))
        return self._next(set(self.order))

    def may_grow(self, key: Key) -> bool:
        """Whether `key` may decide to grow in this pass: it is its turn."""
        return self.turn == key

    def pass_done(self, key: Key, waiting: Iterable[Key]) -> Key | None:
        """`key`'s pass is over: the next key to wake (after a moment), or None."""
        if key != self.turn:
            return None
        still = set(waiting)
        nxt = self._next(still)
        if nxt is None and self.again:
            self.again = False
            self.order = sorted(still, key=lambda k: (self.order_of(k), k))
            nxt = self._next(still)
        return nxt

    def _next(self, waiting: set[Key]) -> Key | None:
        while self.order:
            key = self.order.pop(0)
            if key in waiting:
                self.turn, self.turn_since = key, self.clock()
                return key
        self.turn = None
        return None
