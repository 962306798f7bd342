"""The DDPJob `kubectl ddpj run` writes from its flags (pure)."""

from __future__ import annotations

import argparse
import random
import re
import shlex
from typing import Any

from .. import api

METRICS_PORT = 9400  # the harness's and report()'s default (ddp_trainer.metrics.DEFAULT_PORT)


class BadInput(ValueError):
    """A flag the manifest cannot be built from; the message says what to change."""


def job_manifest(a: argparse.Namespace) -> dict[str, Any]:
    # torchrun through the image's entrypoint (its failure records reach status); the operator sets PET_* for it.
    args = launcher_args(a.module, a.script, list(a.args))
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


WHAT_TO_RUN = "-m MODULE [-- ARGS], --script PATH [-- ARGS], -- python -m MODULE [ARGS] or -- python PATH [ARGS]"
_PYTHON = re.compile(r"python(3(\.\d+)?)?")


def launcher_args(module: str | None, script: str | None, words: list[str]) -> list[str]:
    """The arguments of the image's entrypoint, `python -m ddp_trainer.torchrun`: torchrun, which starts
    --nproc-per-node python processes of a module (`--module M`) or a script (`PATH`), never another program. With
    -m or --script the words after `--` are its arguments; without, they are the command as `kubectl run` and
    `ray job submit` take it, which must then be a python command line: `python -m M ARGS` or `python PATH ARGS`
    (torchrun runs the image's python, always with -u)."""
    if module and script:
        raise BadInput(f"give one thing to run, -m MODULE or --script PATH, not both ({WHAT_TO_RUN})")
    if module:
        return ["--module", module, *words]
    if script:
        return [script, *words]
    if not words:
        raise BadInput(f"give what to run: {WHAT_TO_RUN}")
    got = shlex.join(words[:3]) + (" ..." if len(words) > 3 else "")
    if words[0].startswith("-"):  # arguments, written for a -m or --script that is missing
        raise BadInput(f"give what to run: {WHAT_TO_RUN}; after -- came arguments ({got!r}) but no -m or --script")
    if not _PYTHON.fullmatch(words[0].rsplit("/", 1)[-1]):
        raise BadInput(
            f"the command after -- must be python's (each pod runs it under torchrun, which starts python "
            f"processes of a module or a script): {WHAT_TO_RUN}; got {got!r}"
        )
    rest = words[1:]
    while rest and rest[0] == "-u":  # torchrun runs python -u anyway
        rest = rest[1:]
    if rest[:1] == ["-m"] and len(rest) > 1:
        return ["--module", rest[1], *rest[2:]]
    if rest and rest[0].startswith("-m") and len(rest[0]) > 2:  # python -mpkg.mod
        return ["--module", rest[0][2:], *rest[1:]]
    if rest and not rest[0].startswith("-"):
        return rest
    raise BadInput(
        f"after -- python give -m MODULE or a script PATH, then its arguments (torchrun starts python itself, so "
        f"no other python option reaches it): {WHAT_TO_RUN}; got {got!r}"
    )


def _pair(text: str, flag: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise BadInput(f"{flag} takes KEY=VALUE, got {text!r}")
    return key, value


def random_port() -> int:
    """A rendezvous port for jobs that share one machine (the local node); a real cluster keeps the default."""
    return random.randint(30000, 32000)
