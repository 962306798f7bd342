"""Failing sequences the simulation found, shrunk, kept as named rows (docs/simulation.md): each must now run
through with every invariant holding. The first rows are what it found on the code before issue 54's fixes
(seeds of `make sim`'s first run, tests/sim/driver.py), in the words of the defect they showed."""

from __future__ import annotations

from typing import Any

from sim.world import Config

Row = tuple[str, Config, list[tuple[Any, ...]]]

START = [("reconcile",), ("tick", 1), ("tick", 1)]  # the job's pods created, placed and running

REGRESSIONS: list[Row] = [
    (
        "defect 3: a peer's node is lost; the survivors' agents restarted at once and were charged to the trainer",
        Config(mode="InPlace", replicas=3, backoff_limit=0),
        [*START, ("reconcile",), ("node_lost", 1, 1), ("scrape", 7), ("reconcile",)],
    ),
    (
        "defect 3: a node reboots; the API shows it Ready while its agent is silent and the survivors restarted",
        Config(mode="InPlace", replicas=3, backoff_limit=0),
        [*START, ("reconcile",), ("node_reboot", 1, 1), ("scrape", 7), ("reconcile",), ("tick", 10),
         ("scrape", 7), ("reconcile",), ("tick", 31), ("reconcile",), ("tick", 31), ("reconcile",),
         ("reconcile",), ("tick", 2), ("reconcile",), ("tick", 2), ("reconcile",)],
    ),
    (
        "defect 2: TorchFT, every group crashes at once: BackoffLimitExceeded for one incident",
        Config(mode="TorchFT", replicas=4, backoff_limit=1, platform_limit=3),
        [*START, ("crash_all", 1), ("reconcile",)],
    ),
    (
        "defect 2: TorchFT, a group's node silent while the others crash together: two charges for one incident",
        Config(mode="TorchFT", replicas=3, backoff_limit=1),
        [*START, ("reconcile",), ("node_reboot", 0, 2), ("crash_all", 1), ("reconcile",), ("reconcile",)],
    ),
    (
        "defect 1: a running job under Kueue, its joinTimeoutSeconds patched: the admitted Workload was replaced",
        Config(mode="Recreate", replicas=3, backoff_limit=1, kueue=True),
        [("reconcile",), ("kueue_admit",), ("reconcile",), ("tick", 1), ("tick", 1), ("reconcile",),
         ("patch_join_timeout", 300), ("reconcile",)],
    ),
    (
        "kubectl delete pod of an InPlace job: the agents' restarts read after the replacement ran were the trainer's",
        Config(mode="InPlace", replicas=3, backoff_limit=1),
        [*START, ("delete_pod", 1, 3, True), ("reconcile",), ("reconcile",), ("tick", 1), ("reconcile",),
         ("tick", 1), ("tick", 1), ("reconcile",), ("reconcile",), ("scrape", 3), ("reconcile",)],
    ),
    (
        "a TorchFT job's end written with a 409: its Lighthouse was deleted first, and the next pass failed the job",
        Config(mode="TorchFT+InPlace", replicas=3, backoff_limit=0, platform_limit=3),
        [*START, ("reconcile",), ("conflict_next_pass",), ("succeed",), ("reconcile",), ("reconcile",)],
    ),
]
