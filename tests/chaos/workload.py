"""A seeded workload of DDPJobs, each with a script of faults, and the outcome its restartPolicy and backoffLimit
say it must reach. The expected outcome is computed here from the README's rules, independently of the
operator's own code, so the test can disagree with the operator."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from faults import (API_EVICTION, DELETION, EXIT_CODE, EXIT_CODES, KUBELET_EVICTION, NODE_BLIP, NODE_LOST, POD_FAULTS,
                    Fault)

POLICIES = ("OnFailure", "ExitCode", "Never")
# The platform's failures (docs/operator.md, failure classes) spend runPolicy.platformFailureLimit (default 20),
# never backoffLimit; the trainer's (exit codes, signals) spend backoffLimit.
PLATFORM_FAULTS = (KUBELET_EVICTION, API_EVICTION, DELETION, NODE_LOST)
PLATFORM_FAILURE_LIMIT = 20


@dataclass(frozen=True)
class Outcome:
    phase: str
    reason: str  # reason of the Failed condition, or "Succeeded"
    restarts: int  # the trainer's failures (status.restarts, against backoffLimit)
    faults_used: int  # faults injected before the job is over; later ones in the script never happen
    platform_restarts: int = 0  # the platform's (status.platformRestarts, against platformFailureLimit)


@dataclass
class JobScript:
    name: str
    replicas: int
    policy: str
    backoff_limit: int
    faults: list[Fault] = field(default_factory=list)
    node: str | None = None  # a spare node the job's pods are pinned to (for node blips and node-lost faults)

    def outcome(self) -> Outcome:
        restarts = platform = 0
        for used, fault in enumerate(self.faults, start=1):
            if fault.kind == NODE_BLIP:  # NotReady and back within the node-lost grace: nothing failed
                continue
            if self.policy == "Never":
                return Outcome("Failed", "PodFailed", restarts, used, platform)
            if self.policy == "ExitCode" and not fault.retryable_under_exit_code_policy():
                return Outcome("Failed", "PermanentExitCode", restarts, used, platform)
            if fault.kind in PLATFORM_FAULTS:  # evictions, deletions, lost nodes: their own budget
                if platform >= PLATFORM_FAILURE_LIMIT:
                    return Outcome("Failed", "PlatformFailureLimitExceeded", restarts, used, platform)
                platform += 1
                continue
            if restarts >= self.backoff_limit:
                return Outcome("Failed", "BackoffLimitExceeded", restarts, used, platform)
            restarts += 1
        return Outcome("Succeeded", "Succeeded", restarts, len(self.faults), platform)

    def open_for_more(self) -> bool:
        """Whether one more retryable fault would still be injected (the job has not ended before it)."""
        out = self.outcome()
        return out.phase == "Succeeded" and self.policy != "Never" and out.restarts < self.backoff_limit

    def manifest(self) -> dict:
        selector = {"spare": self.node} if self.node else {"type": "kwok"}
        return {
            "apiVersion": "ddpjob.dev/v1alpha1", "kind": "DDPJob", "metadata": {"name": self.name},
            "spec": {
                "replicas": self.replicas, "gpusPerReplica": 0, "restartPolicy": self.policy,
                "runPolicy": {"backoffLimit": self.backoff_limit, "restartBackoffSeconds": 0},
                "template": {"spec": {
                    # No GPUs: the chaos pods must not starve other suites of the shared simulated GPUs.
                    "nodeSelector": selector,
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "trainer", "image": "example.invalid/trainer:1"}]}},
            },
        }


def random_fault(rng: random.Random, kinds: tuple[str, ...]) -> Fault:
    kind = rng.choice(kinds)
    return Fault(kind, rng.choice(EXIT_CODES) if kind == EXIT_CODE else None)


def build_workload(seed: int, jobs: int, faults: int, kinds: tuple[str, ...] = POD_FAULTS, prefix: str = "j",
                   node_lost_jobs: int = 0, spare_node: str | None = None) -> list[JobScript]:
    """`jobs` scripts holding exactly `faults` injectable faults (as many as the jobs can take). A fault is only
    ever added to a job that would still succeed, so every fault in a script is really injected."""
    rng = random.Random(seed)
    scripts = [JobScript(name=f"{prefix}{i:02d}", replicas=rng.randint(1, 3),
                         policy=rng.choices(POLICIES, weights=(5, 3, 2))[0], backoff_limit=rng.randint(0, 5))
               for i in range(jobs)]
    for script in scripts[:node_lost_jobs]:
        script.node = spare_node
        script.policy = "OnFailure" if script.policy == "Never" else script.policy
        script.backoff_limit = max(1, script.backoff_limit)
        script.faults += [Fault(NODE_BLIP), Fault(NODE_LOST)]
    if len(scripts) > node_lost_jobs + 1:
        # One job spends its whole backoffLimit on the trainer's own failures: with the platform's failures on a
        # budget of their own, a random mix alone reaches BackoffLimitExceeded only now and then.
        spender = scripts[node_lost_jobs]
        spender.policy = "OnFailure"
        spender.faults = [Fault(EXIT_CODE, rng.choice(EXIT_CODES)) for _ in range(spender.backoff_limit + 1)]
    injected = sum(s.outcome().faults_used for s in scripts)
    while injected < faults:
        alive = [s for s in scripts if s.outcome().phase == "Succeeded"]
        if not alive:
            break
        still_open = [s for s in alive if s.open_for_more()]
        # Mostly faults the job survives (restarts), sometimes one that ends it (any terminal path); a fifth of
        # the jobs always stays alive, so the success path is exercised too.
        may_close = len(alive) > jobs // 5
        if not still_open and not may_close:
            break
        pool = still_open if still_open and (rng.random() < 0.75 or not may_close) else alive
        rng.choice(pool).faults.append(random_fault(rng, kinds))
        injected += 1
    for script in scripts:
        script.faults = script.faults[: script.outcome().faults_used]
    return scripts
