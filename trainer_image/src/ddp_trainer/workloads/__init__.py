"""A workload is what the harness trains: a model, data sets of (input, target) pairs, a per-sample loss and a
final evaluation. The bundled ones live next to this file; users bring their own through --entrypoint."""

from __future__ import annotations

from .base import IndexableTensors, Workload

__all__ = ["IndexableTensors", "Workload", "build_workload"]


def build_workload(cfg) -> Workload:
    if cfg.entrypoint:
        from ..user_entrypoint import load_entrypoint

        return load_entrypoint(cfg.entrypoint)(cfg)
    if cfg.workload == "digits":
        from .digits import build
    elif cfg.workload == "cnn":
        from .cnn import build
    else:
        from .gpt import build
    return build(cfg)
