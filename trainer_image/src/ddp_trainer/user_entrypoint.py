"""User code run by the same harness: `--entrypoint package.module:function` or `--entrypoint path/to/train.py`
(function `build_workload`, or `path/to/train.py:function`). The function takes the Config and returns a
Workload; the harness does the rest (DDP, checkpoints, metrics, progress lines)."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

DEFAULT_FUNCTION = "build_workload"


class EntrypointError(ValueError):
    pass


def load_entrypoint(spec: str):
    target, _, function = spec.partition(":")
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise EntrypointError(f"--entrypoint {spec!r}: script {path} does not exist")
        module_spec = importlib.util.spec_from_file_location(f"ddp_trainer_user_{path.stem}", path)
        assert module_spec is not None and module_spec.loader is not None  # a .py path gets a source loader
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        function = function or DEFAULT_FUNCTION
    else:
        if not function:
            raise EntrypointError(f"--entrypoint {spec!r}: expected module:function or a path ending in .py")
        try:
            module = importlib.import_module(target)
        except ImportError as e:
            raise EntrypointError(f"--entrypoint {spec!r}: cannot import {target}: {e}") from e
    build = getattr(module, function, None)
    if not callable(build):
        raise EntrypointError(f"--entrypoint {spec!r}: {module.__name__} has no function {function!r}")
    return build
