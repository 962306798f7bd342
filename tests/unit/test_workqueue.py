"""The work queue: dedup, one pass per key at a time, re-run of keys that changed while processed, delayed
re-adds, and retry with backoff when a pass raises."""

from __future__ import annotations

import asyncio

import pytest

from ddpjob_operator.controller import workqueue
from ddpjob_operator.controller.workqueue import WorkQueue


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=10))


async def until(predicate, what: str) -> None:
    """Wait on the event loop for a positive signal (bounded by run()'s 10 s), never for a fixed time."""
    while not predicate():
        await asyncio.sleep(0.005)


def idle(q: WorkQueue) -> bool:
    return len(q) == 0 and not q._active and not q._timers


def test_duplicate_adds_are_processed_once():
    async def main():
        seen = []

        async def process(key):
            seen.append(key)

        q = WorkQueue(process, workers=2)
        for _ in range(5):
            q.add("a")
        q.add("b")
        q.start()
        await until(lambda: len(seen) == 2 and idle(q), "both keys processed and nothing left")
        await q.stop()
        return seen

    assert sorted(run(main())) == ["a", "b"]


def test_key_is_never_processed_concurrently_and_changes_rerun_it():
    async def main():
        active, overlaps, calls = set(), [], []

        async def process(key):
            if key in active:
                overlaps.append(key)
            active.add(key)
            calls.append(key)
            if len(calls) == 1:
                q.add("a")  # an event while "a" is being processed
                await asyncio.sleep(0.02)  # still busy when the event comes
            active.discard(key)

        q = WorkQueue(process, workers=4)
        q.add("a")
        q.start()
        await until(lambda: len(calls) == 2 and idle(q), "the re-run done and nothing left")
        await q.stop()
        return overlaps, calls

    overlaps, calls = run(main())
    assert overlaps == []
    assert calls == ["a", "a"]


def test_requeue_after_and_earliest_wins():
    async def main():
        times = []
        loop = asyncio.get_running_loop()
        start = loop.time()

        async def process(key):
            times.append(loop.time() - start)
            return 0.2 if len(times) == 1 else None

        q = WorkQueue(process, workers=1)
        q.start()
        q.add_after("a", 5)
        q.add_after("a", 0.1)  # an earlier wake-up replaces the later one
        await until(lambda: len(times) == 2 and idle(q), "the wake-up and its requeue")
        await q.stop()
        return times

    first, second = run(main())  # within run()'s 10 s: the 5 s wake-up did not come first
    # Lower bounds only: a loaded machine may be late, never early.
    assert first >= 0.1 and second - first >= 0.2
    assert first < 5, "the earlier wake-up replaced the later one"


def test_failing_pass_is_retried_with_backoff(monkeypatch, caplog):
    monkeypatch.setattr(workqueue, "RETRY_BASE_SECONDS", 0.05)

    async def main():
        calls = []

        async def process(key):
            calls.append(key)
            if len(calls) < 3:
                raise RuntimeError("apiserver unavailable")

        q = WorkQueue(process, workers=1)
        q.add("a")
        q.start()
        await until(lambda: len(calls) == 3 and idle(q), "two retries, then success")
        await q.stop()
        return calls

    assert run(main()) == ["a", "a", "a"]
    assert "reconcile of a failed (RuntimeError: apiserver unavailable); retrying in 0.1s" in caplog.text


def test_forget_cancels_a_pending_wake_up():
    async def main():
        calls = []

        async def process(key):
            calls.append(key)

        q = WorkQueue(process, workers=1)
        q.start()
        q.add_after("a", 0.05)
        q.add_after("b", 0.1)  # due after "a": once it has run, "a" would have run too had it not been forgotten
        q.forget("a")
        await until(lambda: calls and idle(q), "b processed")
        await q.stop()
        return calls

    assert run(main()) == ["b"]


@pytest.mark.parametrize("adds, want_len", [(["a", "a", "b"], 2), ([], 0)])
def test_len_counts_queued_keys(adds, want_len):
    async def main():
        async def process(key):
            return None

        q = WorkQueue(process)
        for key in adds:
            q.add(key)
        return len(q)

    assert run(main()) == want_len
