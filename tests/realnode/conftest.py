"""Real nodes (hack/realnode.sh): two kubelets of the control plane's release, each with a containerd 2.x of its
own, on this machine, joined to the second control plane beside its simulated nodes. The module that asks for `real_nodes`
brings them up (and the images into them) and takes them down after it, so no other suite sees them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from support.cluster import ROOT, Cluster
from support.realnode import IMAGES_SH, NODES, join, realnode


@pytest.fixture(scope="session")
def cluster(second_cluster):
    """This suite runs on the second control plane, beside the first one's (tests/conftest.py's lanes)."""
    return second_cluster


@pytest.fixture(scope="module")
def real_nodes(cluster: Cluster):
    # The tools (make node-tools, a prerequisite of make test) are built from pins; the images from their inputs.
    subprocess.run(["bash", str(ROOT / "hack" / "build-tools.sh"), "node"], check=True)
    subprocess.run(["bash", str(ROOT / "hack" / "install-node-packages.sh")], check=True)
    for image in ("base", "operator"):
        subprocess.run(["bash", str(IMAGES_SH), image], check=True)
    forward_before = Path("/proc/sys/net/ipv4/ip_forward").read_text()
    join(cluster)
    up = realnode("up", str(len(NODES)), check=False)
    assert up.returncode == 0, up.stdout + up.stderr
    subprocess.run(["bash", str(IMAGES_SH), "load"], check=True)
    yield NODES
    down = realnode("down", check=False)
    assert down.returncode == 0, down.stdout + down.stderr
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text() == forward_before

