"""`python -m ddpjob_operator` / `ddpjob-operator`: run the operator in the foreground."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys
import time
from typing import Any, cast

import kopf
from urllib3.exceptions import HTTPError

from . import uninstall
from .admission import kueue
from .config import OperatorConfig, parse_args
from .controller import kube, leadership
from .controller.handlers import build_registry
from .logfmt import setup_logging
from .metrics import serve
from .placement import gang


def resolve_gang(config: OperatorConfig, attempts: int = 10) -> OperatorConfig:
    """Ask the API server once whether it serves PodGroups, and say what placement this operator gives."""
    log = logging.getLogger("ddpjob")
    if config.gang_scheduling == "off":
        log.info("gang scheduling off (--gang-scheduling=off): pods are placed one by one, not all-or-nothing")
        return config
    for attempt in range(attempts):
        try:
            served = kube.serves(kube.api_client(), gang.GROUP, gang.VERSION, gang.PLURAL)  # discovery, once
            break
        except (HTTPError, OSError, kube.ApiException) as exc:
            if attempt == attempts - 1:
                raise
            log.warning("cannot ask the API server for the PodGroup API yet (%s); retrying", exc)
            time.sleep(min(2**attempt, 10))
    if not served:
        log.warning(
            "the API server does not serve %s/%s podgroups: pods are placed one by one, NOT all-or-nothing (a job "
            "can hold some of its GPUs while the rest wait). Enable the GenericWorkload and GangScheduling feature "
            "gates and --runtime-config=%s/%s=true, then restart the operator",
            gang.GROUP,
            gang.VERSION,
            gang.GROUP,
            gang.VERSION,
        )
        return config
    log.info("gang scheduling on: each attempt is one %s/%s PodGroup, placed all-or-nothing", gang.GROUP, gang.VERSION)
    return dataclasses.replace(config, gang=True)


def resolve_kueue(config: OperatorConfig) -> OperatorConfig:
    """Ask the API server once whether it serves Kueue's Workloads: then a job labelled with a queue waits for
    Kueue's admission. Kueue installed later is seen after a restart of the operator."""
    log = logging.getLogger("ddpjob")
    if config.kueue_mode == "off":
        log.info("Kueue off (--kueue=off): a kueue.x-k8s.io/queue-name label is ignored")
        return config
    # Whether the API server serves Kueue's Workloads (discovery; one request at start).
    if not kube.serves(kube.api_client(), kueue.GROUP, kueue.VERSION, kueue.WORKLOADS):
        log.info(
            "the API server does not serve %s/%s workloads: no Kueue, a queue-name label is ignored",
            kueue.GROUP,
            kueue.VERSION,
        )
        return config
    log.info(
        "Kueue found: jobs labelled %s wait for its admission (Kueue must list %s in integrations.externalFrameworks)",
        kueue.QUEUE_LABEL,
        kueue.FRAMEWORK,
    )
    return dataclasses.replace(config, kueue=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["release-pods"]:  # the Helm chart's pre-delete hook (uninstall.py)
        return uninstall.main(args[1:])
    config = parse_args(args)
    setup_logging(config.verbose)
    if config.metrics_port:
        try:
            serve(config.metrics_port)
        except OSError as exc:
            print(
                f"ddpjob-operator: cannot serve metrics on port {config.metrics_port} ({exc.strerror}); "
                "choose another with --metrics-port",
                file=sys.stderr,
            )
            return 2
    config = dataclasses.replace(resolve_kueue(resolve_gang(config)), identity=leadership.own_identity())
    liveness = f"http://0.0.0.0:{config.liveness_port}/healthz" if config.liveness_port else None
    logging.getLogger("ddpjob").info(
        "starting: namespaces=%s metrics=%s liveness=%s",
        ",".join(config.namespaces) or "*",
        config.metrics_port,
        config.liveness_port,
    )
    asyncio.run(
        kopf.operator(
            registry=build_registry(config),
            clusterwide=config.clusterwide,
            namespaces=list(config.namespaces),
            standalone=config.peering is None,
            priority=config.priority,
            peering_name=config.peering,
            identity=cast(Any, config.identity),  # kopf's Identity is a NewType of str, not exported
            liveness_endpoint=liveness,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
