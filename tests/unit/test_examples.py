"""Every example through the real spec parser and pod builder: what a real GPU node needs is in each pod (a
checkpoint directory on a mounted volume, CPU and memory requests, /dev/shm), and the local-mode hostPath
examples say so. The API server's verdict on each is in tests/integration/test_api_validation.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ddpjob_operator import api
from ddpjob_operator.workers.builders import JobRef, build_worker_pod
from ddpjob_operator.state.spec import parse_spec, trainer_container

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FILES = sorted(EXAMPLES.glob("*.yaml"))


def ddpjob_of(path: Path) -> dict:
    return next(d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == api.KIND)


def pod_of(path: Path) -> dict:
    job = ddpjob_of(path)
    return build_worker_pod(JobRef(job["metadata"]["name"], "ns", "uid"), parse_spec(job["spec"]), index=0,
                            attempt=0, restarts=0)


def gpu_examples() -> list[Path]:
    return [p for p in FILES if parse_spec(ddpjob_of(p)["spec"]).gpus_per_pod > 0]


def checkpoint_dir(container: dict) -> str:
    args = [*(container.get("command") or []), *(container.get("args") or [])]
    return next((a.split("=", 1)[1] for a in args if a.startswith(("--checkpoint.dir=", "--checkpoint-dir="))), "")


def test_the_examples_are_there():
    assert {p.name for p in FILES} >= {"gpu-2x8.yaml", "gpu-pvc.yaml", "elastic-exitcode.yaml", "digits.yaml",
                                       "user-loop.yaml", "torchft.yaml", "restricted.yaml"}
    assert {p.name for p in gpu_examples()} == {"gpu-2x8.yaml", "gpu-pvc.yaml", "elastic-exitcode.yaml",
                                                "torchft.yaml", "restricted.yaml"}


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_example_checkpoints_to_a_mounted_volume(path):
    container = trainer_container(pod_of(path)["spec"]["containers"])
    where = checkpoint_dir(container)
    assert where, f"{path.name}: no checkpoint directory, so every restart starts from step 0"
    mounts = [m["mountPath"] for m in container.get("volumeMounts") or []]
    assert any(where.startswith(m.rstrip("/") + "/") for m in mounts), f"{path.name}: {where} is on no volume"


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_pod_gets_shared_memory_and_a_grace_period(path):
    pod = pod_of(path)
    container = trainer_container(pod["spec"]["containers"])
    assert {"name": api.SHM_VOLUME, "mountPath": api.SHM_MOUNT_PATH} in container["volumeMounts"], path.name
    assert pod["spec"]["terminationGracePeriodSeconds"] > 0


@pytest.mark.parametrize("path", gpu_examples(), ids=[p.name for p in gpu_examples()])
def test_gpu_examples_request_cpu_and_memory(path):
    """Without requests a GPU pod is BestEffort, the first to be evicted under memory pressure."""
    resources = trainer_container(pod_of(path)["spec"]["containers"])["resources"]
    assert {"cpu", "memory"} <= set(resources["requests"]), path.name
    assert resources["limits"]["memory"] == resources["requests"]["memory"], path.name


def test_the_pvc_example_shares_its_claim_writably():
    docs = [d for d in yaml.safe_load_all((EXAMPLES / "gpu-pvc.yaml").read_text()) if d]
    claim = next(d for d in docs if d["kind"] == "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    pod = pod_of(EXAMPLES / "gpu-pvc.yaml")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["checkpoints"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert pod["spec"]["securityContext"]["fsGroup"] == 1000  # trainer_image/Dockerfile's USER 1000:1000
    assert volumes[api.SHM_VOLUME]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}


def test_the_image_user_is_the_fs_group_the_examples_set():
    dockerfile = (EXAMPLES.parent / "trainer_image" / "Dockerfile").read_text()
    assert "USER 1000:1000" in dockerfile


@pytest.mark.parametrize("path", [p for p in FILES if "hostPath:" in p.read_text()],
                         ids=[p.name for p in FILES if "hostPath:" in p.read_text()])
def test_hostpath_examples_say_they_are_local_mode_only_and_show_the_claim(path):
    text = path.read_text()
    assert "LOCAL MODE ONLY" in text and "local-mode only" in text, path.name
    assert "persistentVolumeClaim: {claimName:" in text and "fsGroup: 1000" in text, path.name


def test_the_restricted_example_sets_what_pod_security_restricted_asks_of_its_workers():
    """The API server's verdict on the rendered pods is in tests/integration/test_pod_security.py."""
    pod = pod_of(EXAMPLES / "restricted.yaml")
    security = pod["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True and security["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["spec"]["containers"]:
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    allowed = {"emptyDir", "persistentVolumeClaim", "configMap", "secret", "projected", "downwardAPI", "ephemeral"}
    assert all(set(v) - {"name"} <= allowed for v in pod["spec"]["volumes"]), pod["spec"]["volumes"]
