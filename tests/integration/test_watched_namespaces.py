"""A namespace the operator's --namespace patterns match is watched, however it came: also one created the moment
kopf's namespace observer had listed the namespaces, before its watch listed them again (which kopf itself drops:
controller/kopf_namespaces.py). tests/support/late_namespace_operator.py creates it exactly there, every time."""

from __future__ import annotations

import uuid

from support.cluster import delete_namespace, wait_until
from support.operator import ROOT, OperatorProcess

from ddpjob_manifests import ddpjob
from namespaced_kubectl import Kube

# Run as a module of tests/support (as a script, its folder would come first on sys.path, and its operator.py would
# shadow the standard library's).
LATE = ["-m", "support.late_namespace_operator"]


def test_a_namespace_created_while_the_operator_starts_watching_is_watched(cluster, crds, tmp_path):
    prefix = f"t-late-{uuid.uuid4().hex[:5]}"
    late = f"{prefix}-a"
    op = OperatorProcess(cluster.kubeconfig, [f"{prefix}-*"], tmp_path / "operator.log", verbose=False,
                         env={"LATE_NAMESPACE": late, "PYTHONPATH": str(ROOT / "tests")}, launcher=LATE)
    try:
        op.start()
        wait_until(lambda: f"created {late} after kopf's first listing" in op.log(), timeout=60,
                   what="the namespace created between kopf's two listings")
        wait_until(lambda: cluster.kubectl("-n", late, "get", "serviceaccount", "default", check=False).returncode == 0,
                   timeout=30, what=f"default ServiceAccount in {late}")
        kube = Kube(cluster, late)
        kube.apply(ddpjob("first", replicas=2, gpus=8))
        # No room is needed: a job the operator sees gets a status and its headless Service.
        status = kube.wait_status("first", lambda s: s.get("phase"), timeout=60, what="a phase")
        assert status["phase"] in ("Pending", "Running"), status
        assert kube.get("service", "first") is not None
        assert f"namespace {late} matches --namespace but was not watched" in op.log()
    except BaseException:
        print(f"----- operator log -----\n{op.log()[-20000:]}")
        raise
    finally:
        cluster.kubectl("-n", late, "delete", "ddpjobs", "--all", "--wait=true", "--timeout=30s", check=False)
        op.stop()
        delete_namespace(cluster, late)
