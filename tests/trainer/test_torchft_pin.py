"""torchft is the trainer's dependency only, pinned to the nightly whose DDP comm hook survives a dead peer group
(0.2.0's asserted `fut._fut` and took the healthy group down with it; trainer_image/pyproject.toml says when to move
to a release). test_torchft_replica_groups.py is the behavioural guard; this one fails first, and fast."""

import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PIN = "torchft-nightly==2026.10.26"


def test_the_installed_torchft_is_the_nightly_pin():
    assert version("torchft-nightly") == PIN.split("==")[1]
    try:
        release = version("torchft")
    except PackageNotFoundError:
        release = None
    assert release is None, (
        f"the torchft release {release} is installed beside the nightly: one of them shadows the other"
    )


def test_the_trainer_pins_it_and_the_operator_does_not_have_it():
    def deps(path: str) -> list[str]:
        return tomllib.loads((ROOT / path).read_text())["project"]["dependencies"]

    assert PIN in deps("trainer_image/pyproject.toml")
    assert [d for d in deps("operator/pyproject.toml") if "torchft" in d.lower()] == []


def test_the_lighthouse_script_is_installed():
    import shutil
    import sys

    script = Path(sys.executable).parent / "torchft_lighthouse"
    assert script.exists() or shutil.which("torchft_lighthouse"), "torchft_lighthouse (the Lighthouse) is missing"
