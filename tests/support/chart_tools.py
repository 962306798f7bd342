"""The real binaries the chart tests drive: helm (built into .cache/bin), promtool and prometheus (Debian's
package, hack/install-prometheus.sh). Renders the chart into plain manifests for the tests to read."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "ddpjob-operator"
BIN = ROOT / ".cache" / "bin"
# `helm template` has no cluster to ask, so it renders for the release the local cluster is built from
# (hack/tools/kube/go.mod), which the chart's kubeVersion constraint must accept.
KUBE_VERSION = next(line.split()[-1] for line in (ROOT / "hack/tools/kube/go.mod").read_text().splitlines()
                    if "k8s.io/kubernetes v" in line)
HELM = BIN / "helm"

# Every toggle on: what `helm template` must also render cleanly.
ALL_FEATURES = {
    "metrics.serviceMonitor.enabled": "true",
    "metrics.podMonitor.enabled": "true",
    "prometheusRule.enabled": "true",
    "grafanaDashboard.enabled": "true",
    "ha.enabled": "true",
    "networkPolicy.enabled": "true",
}


def binary(name: str) -> str:
    """Path of a required tool; a missing one fails the test with how to get it, never skips it."""
    if name == "helm":
        if not HELM.exists():
            raise AssertionError(f"{HELM} is missing: run `make tools` (hack/build-tools.sh builds helm)")
        return str(HELM)
    found = shutil.which(name)
    if not found:
        raise AssertionError(f"{name} is not on PATH: run `bash hack/install-prometheus.sh`")
    return found


def helm(*args: str, check: bool = True, kubeconfig: Path | None = None,
         timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [binary("helm"), *args]
    if kubeconfig is not None:
        cmd += ["--kubeconfig", str(kubeconfig)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stderr}{result.stdout}")
    return result


def set_flags(values: dict[str, str]) -> list[str]:
    flags: list[str] = []
    for key, value in values.items():
        flags += ["--set", f"{key}={value}"]
    return flags


def render(values: dict[str, str] | None = None, *, release: str = "ddpjob",
           namespace: str = "ddpjob-system", include_crds: bool = False) -> list[dict]:
    """`helm template` the chart and return its documents (empty ones dropped)."""
    args = ["template", release, str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION,
            *set_flags(values or {})]
    if include_crds:
        args.append("--include-crds")
    out = helm(*args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def find(docs: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def rule_groups(values: dict[str, str] | None = None) -> dict:
    """The PrometheusRule's spec as a Prometheus rule file (what promtool and prometheus read)."""
    docs = render({"prometheusRule.enabled": "true", **(values or {})})
    return {"groups": one(docs, "PrometheusRule")["spec"]["groups"]}


def dashboard() -> dict:
    import json

    return json.loads((CHART / "dashboards" / "ddpjob.json").read_text())
