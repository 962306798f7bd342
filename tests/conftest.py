"""Session-wide fixtures. Tests that need Kubernetes ask for `cluster` (one real control plane per session)
and `namespace` (a fresh namespace per test). Pure unit tests ask for neither and start nothing."""

from __future__ import annotations

import os
import uuid

import pytest


from support import cluster as local_cluster


@pytest.fixture(scope="session")
def cluster():
    c = local_cluster.up()
    os.environ.setdefault("DDPJOB_TEST_KUBECONFIG", str(c.kubeconfig))
    yield c
    # Leave a cluster we started running only when asked (KEEP_CLUSTER=1), so CI ends with nothing left over.
    if c.started_here and os.environ.get("KEEP_CLUSTER") != "1":
        local_cluster.down()


@pytest.fixture(scope="session")
def kube_api(cluster):
    from kubernetes import client, config

    return client.ApiClient(configuration=_load(cluster.kubeconfig, config, client))


def _load(path, config, client):
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=cfg)
    return cfg


@pytest.fixture
def namespace(cluster, request):
    name = f"t-{request.node.name[:30].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    name = "".join(ch for ch in name if ch.isalnum() or ch == "-")
    cluster.kubectl("create", "namespace", name)
    local_cluster.wait_until(
        lambda: cluster.kubectl("-n", name, "get", "serviceaccount", "default", check=False).returncode == 0,
        timeout=30, what=f"default ServiceAccount in {name}")
    yield name
    local_cluster.delete_namespace(cluster, name)


def pytest_collection_modifyitems(session, config, items):
    # A test marked `disrupts_cluster` (an apiserver outage, a control plane restarted without an API) disturbs
    # every suite sharing the cluster: it runs after all of them, whatever its file is called.
    last = [item for item in items if item.get_closest_marker("disrupts_cluster")]
    items[:] = [item for item in items if item not in last] + last
