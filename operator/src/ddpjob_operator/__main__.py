"""`python -m ddpjob_operator` / `ddpjob-operator`: run the operator in the foreground."""

from __future__ import annotations

import asyncio
import logging
import sys

import kopf

from .config import parse_args
from .handlers import build_registry
from .logfmt import setup_logging
from .metrics import serve


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
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
            liveness_endpoint=liveness,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
