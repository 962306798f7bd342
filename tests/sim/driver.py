"""Seeded runs of the simulation, and the shrinker that turns a failing run into a short story.

All randomness comes from one `random.Random(seed)`: a seed replays exactly. `run_seed` draws a Config and a
sequence of events, checks the invariants after every event and stops at the first broken one; `shrink` then
removes events (halves first, then one at a time) and lowers their arguments while the same invariant still
breaks, so a failure prints as a row of a few events (docs/simulation.md)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from sim.invariants import broken
from sim.world import MODES, Config, World

Event = tuple[Any, ...]


def random_config(rng: random.Random) -> Config:
    mode = rng.choice(MODES)
    return Config(
        mode=mode,
        replicas=rng.randint(2, 4),
        backoff_limit=rng.choice([0, 0, 1, 3]),
        platform_limit=rng.choice([3, 20]),
        kueue=rng.random() < 0.3,
    )


FAULTS = ("crash", "crash_all", "delete_pod", "evict", "node_lost", "node_reboot", "never_starts")


def random_event(rng: random.Random, config: Config) -> Event:
    roll = rng.random()
    index = rng.randrange(config.replicas)
    if roll < 0.36:
        return ("reconcile",)
    if roll < 0.56:
        return ("tick", rng.choice([0.5, 1, 2, 5, 10, 31]))
    if roll < 0.70:
        return ("scrape", rng.randrange(1 << config.replicas))
    if roll < 0.78:
        fault = rng.choice(FAULTS)
        if fault == "crash":
            return ("crash", index, rng.choice([1, 65, 137, 143]))
        if fault == "crash_all":
            return ("crash_all", rng.choice([1, 137]))
        if fault in ("delete_pod", "evict"):
            return ("delete_pod", index, rng.randint(1, 3), fault == "evict")
        if fault in ("node_lost", "node_reboot"):
            return (fault, index, rng.randint(1, 2))
        return ("never_starts", index)
    if roll < 0.81:
        return ("node_monitor",)
    if roll < 0.84:
        return ("refuse_creates", rng.random() < 0.4)
    if roll < 0.87:
        return ("operator_restart",)
    if roll < 0.90:
        return ("crash_during_next_pass", rng.randint(0, 3))
    if roll < 0.92:
        return ("conflict_next_pass",)
    if roll < 0.94:
        return ("patch_join_timeout", rng.choice([60, 300, 900]))
    if roll < 0.985:
        return ("kueue_admit",) if config.kueue else ("reconcile",)
    if roll < 0.99:
        return ("kueue_evict",) if config.kueue else ("tick", 1)
    return ("succeed",)


@dataclass
class Outcome:
    config: Config
    events: list[Event]
    steps: int
    problem: str | None
    world: World


def run(config: Config, events: list[Event]) -> Outcome:
    """Replay `events`, checking every invariant after each; stop at the first that breaks."""
    world = World(config)
    for steps, event in enumerate(events, 1):
        world.apply(event)
        problem = broken(world)
        if problem is not None:
            return Outcome(config, events[:steps], steps, problem, world)
    return Outcome(config, events, len(events), None, world)


def run_seed(seed: int, steps: int) -> Outcome:
    rng = random.Random(seed)
    config = random_config(rng)
    world = World(config)
    events: list[Event] = []
    for n in range(1, steps + 1):
        event = random_event(rng, config)
        events.append(event)
        world.apply(event)
        problem = broken(world)
        if problem is not None:
            return Outcome(config, events, n, problem, world)
        if world.job is None or world.status.get("phase") in ("Succeeded", "Failed"):
            # The job ended: time passes with the operator's passes, and the clean-up is checked too.
            for drain in DRAIN:
                events.append(drain)
                world.apply(drain)
                problem = broken(world)
                if problem is not None:
                    return Outcome(config, events, len(events), problem, world)
            break
    return Outcome(config, events, len(events), None, world)


DRAIN: list[Event] = [e for _ in range(15) for e in (("tick", 31), ("reconcile",))]


def _same_failure(config: Config, events: list[Event], problem: str) -> bool:
    out = run(config, events)
    return out.problem is not None and out.problem.split(":")[0] == problem.split(":")[0]


def shrink(outcome: Outcome, budget: int = 4000) -> Outcome:
    """The shortest sequence found that breaks the same invariant."""
    assert outcome.problem is not None
    config, events, problem = outcome.config, list(outcome.events), outcome.problem
    tries = 0
    chunk = max(1, len(events) // 2)
    while chunk >= 1 and tries < budget:
        i, removed = 0, False
        while i < len(events) and tries < budget:
            candidate = events[:i] + events[i + chunk :]
            tries += 1
            if candidate and _same_failure(config, candidate, problem):
                events, removed = candidate, True
            else:
                i += chunk
        if not removed:
            chunk //= 2
    # Shorter ticks and fewer restarts read better: lower numeric arguments while it still fails.
    for i, event in enumerate(events):
        if event[0] == "tick":
            for seconds in (1, 5, 10):
                if seconds < event[1] and _same_failure(config, [*events[:i], ("tick", seconds), *events[i + 1 :]],
                                                        problem):
                    events[i] = ("tick", seconds)
                    break
    return run(config, events)


def story(outcome: Outcome) -> str:
    lines = [f"config: {outcome.config}", f"broken: {outcome.problem}", "events:"]
    lines += [f"  {event!r}," for event in outcome.events]
    return "\n".join(lines)
