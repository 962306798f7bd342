"""The apiserver goes away for 20 s in the middle of the workload and comes back. The operator (never restarted
by the test) reconnects by itself, and every invariant of the operator-kill run holds.

Marked disrupts_cluster so that it runs last in `make test`: stopping the shared apiserver disturbs whatever else
is running."""

from __future__ import annotations

import threading
import time

import pytest

from chaos_run import run_chaos
from operator_chaos import OperatorUnderChaos
from support.cluster import Cluster
from workload import build_workload

pytestmark = pytest.mark.slow

JOBS = 20
FAULTS = 20
DOWN_SECONDS = 20
DOWN_AFTER_SECONDS = 6  # while the jobs are still being created (over 10 s)


class ApiserverOutage(threading.Thread):
    """Stops the apiserver, starts it again, then keeps the rest of the shared control plane whole until the
    test ends: after the outage the kube-scheduler has been seen to exit a minute later, which would leave every
    pod (of every suite) Pending. `cluster.sh start` is a no-op for a component that runs."""

    def __init__(self, cluster: Cluster):
        super().__init__(daemon=True, name="apiserver-outage")
        self.cluster = cluster
        self.down_at = self.up_at = None
        self.error: str | None = None
        self.revived: list[str] = []
        self.finished = threading.Event()

    def run(self) -> None:
        time.sleep(DOWN_AFTER_SECONDS)
        try:
            self.cluster.sh("stop", "kube-apiserver", check=True, capture_output=True, timeout=60)
            self.down_at = time.monotonic()
            time.sleep(DOWN_SECONDS)
        finally:
            # Always bring it back, even if the stop failed half-way: the cluster is shared.
            result = self.cluster.sh("start", "kube-apiserver", capture_output=True, text=True, timeout=180)
            self.up_at = time.monotonic()
            if result.returncode != 0:
                self.error = result.stderr[-2000:]
            self._keep_components_up()

    def _keep_components_up(self) -> None:
        while not self.finished.wait(3):
            status = self.cluster.sh("status", capture_output=True, text=True).stdout
            for component in ("kube-controller-manager", "kube-scheduler", "kwok"):
                if f"{component}: stopped" in status:
                    self.revived.append(component)
                    self.cluster.sh("start", component, capture_output=True, timeout=120)

    def join(self, timeout=None) -> None:
        self.finished.set()
        super().join(timeout)


@pytest.mark.disrupts_cluster
def test_apiserver_restart_mid_workload_keeps_every_invariant(cluster, api, namespace, operator_process, seed,
                                                             figures):
    scripts = build_workload(seed, jobs=JOBS, faults=FAULTS, prefix="a")
    outage = ApiserverOutage(cluster)
    chaos = OperatorUnderChaos(operator_process, seed, kill=False)
    recorder, driver = run_chaos(api, namespace, chaos, scripts, seed, figures, timeout=300, during=outage)
    figures.faults += 1  # the outage itself
    figures.detail += f"; apiserver down {outage.up_at - outage.down_at:.0f}s" if outage.down_at else ""
    figures.detail += f"; revived after it: {outage.revived}" if outage.revived else ""

    assert outage.error is None, outage.error
    assert outage.down_at is not None, "the apiserver was never stopped"
    assert operator_process.starts == 1 and operator_process.alive(), "the operator must survive the outage itself"
    assert recorder.violations == [], "\n".join(recorder.violations[:30])
    assert recorder.watch_restarts > 0, "the outage did not even break the test's own watches"
    assert driver.total_faults == sum(s.outcome().faults_used for s in scripts)
