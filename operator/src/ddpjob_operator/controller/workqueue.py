"""A small asyncio work queue of job keys, like client-go's: a key is queued at most once, processed by one
worker at a time (a key that changes while being processed is re-run afterwards), and can be re-added later
(backoff, deadlines, TTL). Failures retry with a per-key exponential backoff."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

log = logging.getLogger("ddpjob.workqueue")

RETRY_BASE_SECONDS = 0.5
RETRY_CAP_SECONDS = 30.0


class WorkQueue:
    def __init__(self, process: Callable[[Any], Awaitable[float | None]], workers: int = 4):
        self._process = process
        self._workers = workers
        self._queue: asyncio.Queue = asyncio.Queue()
        self._queued: set = set()
        self._active: set = set()
        self._dirty: set = set()
        self._timers: dict[Hashable, tuple[float, asyncio.TimerHandle]] = {}
        self._failures: dict[Hashable, int] = {}
        self._tasks: list[asyncio.Task] = []

    def __len__(self) -> int:
        return len(self._queued)

    def add(self, key: Hashable) -> None:
        if key in self._active:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: Hashable, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        existing = self._timers.get(key)
        if existing and existing[0] <= when:
            return  # an earlier wake-up is already scheduled; it re-plans and re-schedules anyway
        if existing:
            existing[1].cancel()
        self._timers[key] = (when, loop.call_at(when, self._fire, key))

    def forget(self, key: Hashable) -> None:
        timer = self._timers.pop(key, None)
        if timer:
            timer[1].cancel()
        self._failures.pop(key, None)

    def _fire(self, key: Hashable) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._worker(i), name=f"ddpjob-worker-{i}") for i in range(self._workers)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for _, timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    async def _worker(self, number: int) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._active.add(key)
            requeue: float | None
            try:
                requeue = await self._process(key)
                self._failures.pop(key, None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a pass must never kill its worker; it retries with backoff instead
                count = self._failures.get(key, 0) + 1
                self._failures[key] = count
                requeue = min(RETRY_CAP_SECONDS, RETRY_BASE_SECONDS * 2 ** (count - 1))
                log.warning(
                    "reconcile of %s failed (%s: %s); retrying in %.1fs",
                    key,
                    type(exc).__name__,
                    exc,
                    requeue,
                    exc_info=log.isEnabledFor(logging.DEBUG),
                )
            finally:
                self._active.discard(key)
                self._queue.task_done()
            if key in self._dirty:
                self._dirty.discard(key)
                self.add(key)
            elif requeue is not None:
                self.add_after(key, requeue)
