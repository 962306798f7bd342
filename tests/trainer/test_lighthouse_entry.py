"""The image's `ddp-lighthouse` (ddp_trainer/lighthouse.py): torchft's Lighthouse without importing torch. It loads
torchft's Rust extension alone, so a new Lighthouse listens at once and stays small; torchft's own script imports
torch first (2.5 CPU-s and 738 MB resident on the 2-core VM). Both are real Lighthouses here: the same options, a
status page that answers, and a quorum that two replica groups form through it (test_torchft_replica_groups.py and
the other torchft tests use `ddp-lighthouse` too)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from launch import stop
from support.ports import free_port
from torchft_launch import LIGHTHOUSE, TORCHFT_LIGHTHOUSE, start_lighthouse

from ddp_trainer import lighthouse


def mapped_files(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def resident_kib(pid: int) -> int:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1])


def test_the_extension_loads_without_the_torchft_package_or_torch():
    code = (
        "import sys\n"
        "from ddp_trainer import lighthouse\n"
        "module = lighthouse.load_extension()\n"
        "assert callable(module.lighthouse_main)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchft')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "['torchft._torchft']", out.stdout  # the extension alone: no package, no torch
    assert lighthouse.extension_path().name.startswith("_torchft")


@pytest.mark.parametrize("script, torch_loaded", [(LIGHTHOUSE, False), (TORCHFT_LIGHTHOUSE, True)],
                         ids=["ddp-lighthouse", "torchft_lighthouse"])
def test_a_lighthouse_listens_and_only_torchfts_script_loads_torch(tmp_path, script, torch_loaded):
    proc = start_lighthouse(free_port(), 1000, tmp_path / "lighthouse.log", script=script)  # waits for its page
    try:
        maps = mapped_files(proc.pid)
        assert ("libtorch" in maps) == torch_loaded, script
        if not torch_loaded:
            assert resident_kib(proc.pid) < 100 * 1024  # MiB, against about 700 with torch
    finally:
        stop(proc)
