"""DDPJob manifests for the simulated GPU nodes."""

from __future__ import annotations


def ddpjob(name: str, replicas: int = 2, gpus: int = 8, **spec) -> dict:
    """A DDPJob for the simulated GPU nodes, with fast restarts (restartBackoffSeconds 0)."""
    run_policy = {"restartBackoffSeconds": 0, **spec.pop("runPolicy", {})}
    return {
        "apiVersion": "ddpjob.dev/v1alpha1", "kind": "DDPJob", "metadata": {"name": name},
        "spec": {"replicas": replicas, "gpusPerReplica": gpus, "runPolicy": run_policy,
                 "template": {"spec": {"containers": [{"name": "trainer", "image": "example.invalid/trainer:1",
                                                       "env": [{"name": "LR", "value": "0.1"}]}]}},
                 **spec},
    }
