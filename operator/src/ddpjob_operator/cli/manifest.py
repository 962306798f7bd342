"""The DDPJob `kubectl ddpj run` writes from its flags (pure)."""

from __future__ import annotations

import argparse
import random
from typing import Any

from .. import api

METRICS_PORT = 9400  # the harness's and report()'s default (ddp_trainer.metrics.DEFAULT_PORT)


class BadInput(ValueError):
    """A flag the manifest cannot be built from; the message says what to change."""


def job_manifest(a: argparse.Namespace) -> dict[str, Any]:
    if bool(a.module) == bool(a.script):
        raise BadInput("give what to run: -m MODULE (python -m) or --script PATH (a file in the image), not both")
    # torchrun through the image's entrypoint (its failure records reach status); the operator sets PET_* for it.
    args = (["--module", a.module] if a.module else [a.script]) + list(a.args)
    container: dict[str, Any] = {
        "name": api.TRAINER_CONTAINER,
        "image": a.image,
        "command": ["python", "-m", "ddp_trainer.torchrun"],
        "args": args,
        "ports": [{"name": api.METRICS_PORT_NAME, "containerPort": METRICS_PORT}],
    }
    pod_spec: dict[str, Any] = {"containers": [container]}
    if a.node_selector:
        pod_spec["nodeSelector"] = dict(_pair(s, "--node-selector") for s in a.node_selector)
    if a.toleration:
        pod_spec["tolerations"] = [{"key": key, "operator": "Exists"} for key in a.toleration]
    spec: dict[str, Any] = {
        "replicas": a.replicas,
        "nprocPerNode": a.nproc_per_node,
        "gpusPerReplica": a.gpus,
        "runPolicy": {"backoffLimit": a.backoff_limit, "restartStrategy": a.restart_strategy},
        "template": {"spec": pod_spec},
    }
    if a.min_replicas is not None or a.max_replicas is not None:
        low = a.min_replicas if a.min_replicas is not None else a.replicas
        high = a.max_replicas if a.max_replicas is not None else a.replicas
        if not low <= a.replicas <= high:
            raise BadInput(f"--replicas {a.replicas} must be within --min-replicas {low} and --max-replicas {high}")
        spec["elastic"] = {"minReplicas": low, "maxReplicas": high}
    if a.rendezvous_port:
        spec["rendezvous"] = {"port": a.rendezvous_port}
    metadata: dict[str, Any] = {"name": a.name}
    if a.namespace:
        metadata["namespace"] = a.namespace
    if a.queue:
        metadata["labels"] = {"kueue.x-k8s.io/queue-name": a.queue}
    return {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": metadata, "spec": spec}


def _pair(text: str, flag: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise BadInput(f"{flag} takes KEY=VALUE, got {text!r}")
    return key, value


def random_port() -> int:
    """A rendezvous port for jobs that share one machine (the local node); a real cluster keeps the default."""
    return random.randint(30000, 32000)
