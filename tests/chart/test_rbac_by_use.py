"""RBAC by use: the operator, out of the cluster but holding only the chart's ServiceAccount token, carries a
DDPJob through create -> pod failure -> group restart -> success, with no request refused; actions outside its
rules are refused. Both modes: cluster-wide (ClusterRole) and singleNamespace (Role in the watched namespace)."""

from __future__ import annotations

import re

import pytest

from support import job_lifecycle
import operator_as_service_account as operator_sa

REFUSED = re.compile(r"forbidden|\b403\b|unauthorized|\b401\b", re.I)


def assert_finished_after_one_restart(job: dict) -> None:
    status = job["status"]
    assert status["phase"] == "Succeeded"
    assert status["restarts"] == 1
    assert status["attempt"] == 1


def assert_no_request_refused(run: operator_sa.OperatorRun) -> None:
    refused = [line for line in run.log_text().splitlines() if REFUSED.search(line)]
    assert not refused, "the operator was refused by RBAC:\n" + "\n".join(refused[:20])


def assert_refused(result, what: str) -> None:
    assert result.returncode != 0, f"{what} was allowed: {result.stdout}"
    assert "forbidden" in result.stderr.lower(), result.stderr


@pytest.fixture(scope="module")
def single_namespace_operator(cluster, chart_crds, tmp_path_factory):
    run = operator_sa.start(cluster, tmp_path_factory.mktemp("operator-single"), single_namespace=True)
    yield run
    operator_sa.stop(run)


def test_cluster_wide_operator_runs_a_job_through_a_restart(cluster_wide_operator, cluster_wide_job):
    assert_finished_after_one_restart(cluster_wide_job)
    assert_no_request_refused(cluster_wide_operator)
    assert cluster_wide_operator.proc.poll() is None, "the operator died"


def test_cluster_wide_token_can_list_and_watch_across_namespaces(cluster_wide_operator):
    # What --all-namespaces does at start: list and watch DDPJobs and pods across the cluster.
    run = cluster_wide_operator
    for resource in ("ddpjobs.ddpjob.dev", "pods"):
        result = run.kubectl_as_operator("get", resource, "--all-namespaces", "-o", "name")
        assert result.returncode == 0, result.stderr
        for verb in ("list", "watch"):
            can = run.kubectl_as_operator("auth", "can-i", verb, resource, "--all-namespaces")
            assert can.stdout.strip() == "yes", f"{verb} {resource}: {can.stdout}{can.stderr}"


def test_cluster_wide_token_is_refused_secrets_and_exec(cluster_wide_operator, cluster_wide_job):
    run = cluster_wide_operator
    assert_refused(run.kubectl_as_operator("get", "secrets", "-n", run.watch_namespace), "listing secrets")
    assert_refused(run.kubectl_as_operator("get", "secrets", "--all-namespaces"), "listing secrets cluster-wide")
    pod = job_lifecycle.pods_of(run.cluster, run.watch_namespace, job_lifecycle.JOB_NAME, 1)[0]["metadata"]["name"]
    # The exec request itself (kubectl exec would already stop at reading the pod, which is not granted either).
    exec_url = f"/api/v1/namespaces/{run.watch_namespace}/pods/{pod}/exec?command=true&stdout=true"
    refused = run.kubectl_as_operator("create", "--raw", exec_url, "-f", "/dev/null")
    assert_refused(refused, "pods/exec")
    assert 'cannot create resource "pods/exec"' in refused.stderr
    assert_refused(run.kubectl_as_operator("delete", "nodes", "--all", "--dry-run=server"), "deleting nodes")


def test_single_namespace_operator_runs_a_job_through_a_restart(cluster, single_namespace_operator):
    run = single_namespace_operator
    job = operator_sa.with_log(run, job_lifecycle.drive_through_restart, cluster, run.watch_namespace)
    assert_finished_after_one_restart(job)
    assert_no_request_refused(run)


def test_single_namespace_token_is_refused_outside_its_namespace(single_namespace_operator):
    run = single_namespace_operator
    assert_refused(run.kubectl_as_operator("get", "pods", "--all-namespaces"), "listing pods cluster-wide")
    assert_refused(run.kubectl_as_operator("get", "pods", "-n", run.release_namespace), "pods in another namespace")
    assert_refused(run.kubectl_as_operator("get", "ddpjobs.ddpjob.dev", "-n", "default"), "jobs in another namespace")
    assert_refused(run.kubectl_as_operator("get", "secrets", "-n", run.watch_namespace), "listing secrets")
    assert_refused(run.kubectl_as_operator("create", "deployment", "x", "--image=x", "-n", run.watch_namespace),
                   "creating a Deployment")
