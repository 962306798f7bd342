"""HA by use: with ha.enabled (singleNamespace, so kopf's peering is the chart's namespaced KopfPeering), a
primary and a standby operator run as the chart's ServiceAccount. The standby pauses in favour of the primary;
the primary runs the job; when the primary stops, the standby resumes and finishes the job. No request is
refused, so the peering RBAC is exactly enough."""

from __future__ import annotations

import json
import urllib.request

import pytest

from support import job_lifecycle
import operator_as_service_account as operator_sa
from support.cluster import wait_until
from test_rbac_by_use import assert_no_request_refused

# kopf starts a peering operator paused and resumes it only when no higher priority is alive.
PAUSED = "Pausing the watch-stream for ddpjobs.v1alpha1.ddpjob.dev"
RESUMED = "Resuming operations after the pause"


@pytest.fixture(scope="module")
def primary_and_standby(cluster, chart_crds, tmp_path_factory):
    work = tmp_path_factory.mktemp("operator-ha")
    run = operator_sa.start(cluster, work, single_namespace=True, ha=True)
    standby_log = work / "standby.log"
    # --verbose: kopf's pause/resume lines are INFO, which the operator's normal logging leaves out.
    standby, standby_metrics = operator_sa.spawn(run, standby_log,
                                                 ["--peering", run.fullname, "--priority", "50", "--verbose"])
    run.standby_metrics_port = standby_metrics
    yield run, standby, standby_log
    operator_sa.terminate(standby)
    operator_sa.stop(run)


def test_standby_pauses_and_takes_over_when_the_primary_stops(cluster, primary_and_standby):
    run, standby, standby_log = primary_and_standby
    ns, name = run.watch_namespace, "ha-probe"
    standby_text = lambda: standby_log.read_text(errors="replace")  # noqa: E731
    # Both keep-alives land in the chart's KopfPeering: the peering RBAC works for both.
    wait_until(lambda: sorted(p.get("priority") for p in (job_lifecycle.get_json(
        cluster, ns, "kopfpeering", run.fullname).get("status") or {}).values()) == [50, 100],
        timeout=60, what="keep-alives of priorities 50 and 100 in the KopfPeering")
    wait_until(lambda: PAUSED in standby_text(), timeout=60, what="the standby pausing for the primary")

    # The primary alone starts the job.
    cluster.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(job_lifecycle.job_manifest(name)))
    operator_sa.with_log(run, wait_until, lambda: job_lifecycle.running(job_lifecycle.pods_of(cluster, ns, name, 0), 2),
                         timeout=90, what="the primary creating the pods")
    assert f"job={ns}/{name}" not in standby_text(), "the paused standby touched the job"
    assert RESUMED not in standby_text(), "the standby resumed while the primary was alive"

    # A clean stop removes the primary from the peering, so the standby resumes without waiting for expiry.
    operator_sa.terminate(run.proc)
    wait_until(lambda: RESUMED in standby_text(), timeout=60, what="the standby resuming")
    for index in range(2):
        job_lifecycle.set_pod_terminated(cluster, ns, f"{name}-worker-{index}", exit_code=0)
    wait_until(lambda: job_lifecycle.get_json(cluster, ns, "ddpjob", name).get("status", {}).get("phase")
               == "Succeeded", timeout=90, what=f"the standby finishing {ns}/{name}:\n{standby_text()[-4000:]}")

    assert_no_request_refused(run)
    refused = [line for line in standby_text().splitlines() if "forbidden" in line.lower()]
    assert not refused, refused


def metric(port: int, name: str) -> float:
    """The sum of a counter's samples on an operator's /metrics page."""
    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as rsp:
        text = rsp.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def passes_offered(port: int) -> float:
    """Passes the work queue ran: skipped by a standby, or planned."""
    return (metric(port, "ddpjob_standby_passes_skipped_total")
            + metric(port, "ddpjob_reconcile_duration_seconds_count"))


def test_a_standby_paused_by_the_returning_primary_writes_nothing(cluster, primary_and_standby, tmp_path):
    """After a fail-over the old primary comes back and the standby pauses. kopf's pause stops its watch streams
    only: its work queue and resync went on planning from a frozen cache. Here the frozen cache holds a Running
    job whose activeDeadlineSeconds runs out while the standby is paused, so every pass it plans would write
    (Failed, DeadlineExceeded, its pods deleted). The standby sends no write at all; the primary ends the job."""
    run, standby, standby_log = primary_and_standby
    if run.proc.poll() is None:  # run alone: fail over first, as the test before does
        operator_sa.terminate(run.proc)
    ns, name = run.watch_namespace, "ha-deadline"
    standby_text = lambda: standby_log.read_text(errors="replace")  # noqa: E731
    job = job_lifecycle.job_manifest(name)
    # The deadline must outlast the primary's return and the standby's pause (about 10 s: the primary settles in
    # for 6 s first), checked below, and no more: the test waits it out.
    job["spec"].setdefault("runPolicy", {})["activeDeadlineSeconds"] = 40
    cluster.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(job))
    wait_until(lambda: job_lifecycle.get_json(cluster, ns, "ddpjob", name).get("status", {}).get("phase")
               == "Running", timeout=90, what=f"the standby (leading now) running {ns}/{name}")

    primary, _ = operator_sa.spawn(run, tmp_path / "primary-again.log", ["--peering", run.fullname, "--priority",
                                                                          "100"])
    try:
        wait_until(lambda: "standing by in the peering" in standby_text(), timeout=60,
                   what="the standby standing by for the returning primary")
        writes = metric(run.standby_metrics_port, "ddpjob_api_writes_total")
        offered = passes_offered(run.standby_metrics_port)
        # Still Running when the standby paused: its frozen cache holds a job whose deadline has yet to run out
        # (else the standby, leading until then, may have ended it itself and this test would prove nothing).
        assert job_lifecycle.get_json(cluster, ns, "ddpjob", name)["status"]["phase"] == "Running"
        wait_until(lambda: job_lifecycle.get_json(cluster, ns, "ddpjob", name).get("status", {}).get("reason")
                   == "DeadlineExceeded", timeout=120, what="the returned primary ending the job at its deadline")
        # The standby's resync (every 5 s) keeps offering it passes: they are skipped, and none writes.
        wait_until(lambda: passes_offered(run.standby_metrics_port) >= offered + 3,
                   timeout=60, what="three more passes offered to the paused standby")
        assert metric(run.standby_metrics_port, "ddpjob_api_writes_total") == writes, standby_text()[-4000:]
    finally:
        operator_sa.terminate(primary)
