"""The image definition: hadolint-clean, an official PyTorch CUDA runtime base pinned by tag, non-root,
`python -m ddp_trainer.torchrun` (torchrun plus the failed worker's stderr tail) as the entrypoint with `-m ddp_trainer` as the default arguments."""

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "trainer_image" / "Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"


def instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    return [tuple(line.split(None, 1)) for line in joined.splitlines() if line.strip() and not line.startswith("#")]


def hadolint(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(HADOLINT), "--no-color", str(path)], capture_output=True, text=True, timeout=60)


def test_hadolint_passes():
    result = hadolint(DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_really_lints(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:latest\nRUN apt-get install -y curl\n")
    result = hadolint(bad)
    assert result.returncode != 0 and "DL3007" in result.stdout  # "Using latest is prone to errors"


def test_base_image_is_pinned_official_cuda_runtime():
    steps = instructions(DOCKERFILE.read_text())
    base = [arg for op, arg in steps if op == "FROM"]
    assert len(base) == 1
    # FROM names the BASE_IMAGE build argument (a registry-free build passes its own stand-in, hack/images.sh);
    # its default is the base users build on.
    if base[0] == "${BASE_IMAGE}":
        base = [arg.split("=", 1)[1] for op, arg in steps if op == "ARG" and arg.startswith("BASE_IMAGE=")]
        assert len(base) == 1
    image, _, tag = base[0].partition(":")
    assert image == "pytorch/pytorch"
    assert re.fullmatch(r"\d+\.\d+\.\d+-cuda\d+\.\d+-cudnn\d+-runtime", tag), tag


def test_runs_as_non_root():
    users = [arg for op, arg in instructions(DOCKERFILE.read_text()) if op == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")


def test_entrypoint_is_the_harness_torchrun_with_ddp_trainer_args():
    ops = dict(instructions(DOCKERFILE.read_text()))
    assert json.loads(ops["ENTRYPOINT"]) == ["python", "-m", "ddp_trainer.torchrun"]
    assert json.loads(ops["CMD"]) == ["-m", "ddp_trainer"]


def test_constraints_pin_every_dependency_but_torch():
    import tomllib
    deps = tomllib.loads((ROOT / "trainer_image" / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=!~ ]", d)[0].lower() for d in deps} - {"torch"}
    pinned = dict(line.split("==") for line in (ROOT / "trainer_image" / "constraints.txt").read_text().splitlines()
                  if line and not line.startswith("#"))
    assert names <= set(pinned), names - set(pinned)
