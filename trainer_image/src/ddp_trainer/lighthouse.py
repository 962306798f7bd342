"""`ddp-lighthouse`: torchft's Lighthouse, started without importing torch.

torchft's own `torchft_lighthouse` script does `from torchft._torchft import lighthouse_main`, which first runs the
torchft package's `__init__`, and that imports torch and torchft's Manager: 2.5 CPU-seconds and 738 MB resident
before the Lighthouse listens (measured on the 2-core VM, torchft-nightly 2026.10.26). The Lighthouse itself is
Rust: `_torchft`, an extension that links no torch library. So this loads that extension file alone, from the
installed torchft package, without running the package (0.02 s and 12 MB, the same machine), and calls the same
`lighthouse_main`. A lost Lighthouse is on every replica group's path until its successor listens
(docs/fault-tolerance.md), and a new one starts beside busy trainers.

`lighthouse_main` reads its options from the process's own argv, skipping the interpreter and taking the next word
as the program's name: started as a script (`ddp-lighthouse --min_replicas=2 ...`, which runs as `python
.../ddp-lighthouse --min_replicas=2 ...`) that is this script's path, as for torchft's own script. The operator
runs this when the image has it, else torchft's script (replica_groups.LIGHTHOUSE_COMMAND)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXTENSION = "_torchft"


def extension_path() -> Path:
    """The installed torchft package's Rust extension, found without importing the package."""
    spec = importlib.util.find_spec("torchft")  # a top-level package: found, not run
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("ddp-lighthouse: torchft is not installed in this image")
    for folder in spec.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(folder) / f"{EXTENSION}{suffix}"
            if path.is_file():
                return path
    raise SystemExit(f"ddp-lighthouse: no {EXTENSION} extension in {list(spec.submodule_search_locations)}")


def load_extension(path: Path | None = None) -> ModuleType:
    path = path or extension_path()
    name = f"torchft.{EXTENSION}"
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    assert spec is not None, path
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def main() -> None:
    sys.exit(load_extension().lighthouse_main())
