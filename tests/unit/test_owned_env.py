"""The environment the operator owns, as docs/contract.md tells it: each variable it sets is either refused in the
template by the CRD (its env rule) or dropped from it, the operator's value in its place (rendezvous.merge_env), and
the page names each, in its list (issue 54, defect 13's drift)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ddpjob_operator.state.spec import parse_spec
from ddpjob_operator.workers.builders import JobRef, build_worker_pod

from job_builders import NS, UID, make_job

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = (ROOT / "docs" / "contract.md").read_text()


def env_rule() -> str:
    text = (ROOT / "crds" / "ddpjob.dev_ddpjobs.yaml").read_text()
    return next(line for line in text.splitlines() if "self.name.startsWith('PET_')" in line)


def refused_by_the_crd(name: str) -> bool:
    rule = env_rule()
    prefixes = re.findall(r"self\.name\.startsWith\('([A-Z_]+)'\)", rule)
    names = re.findall(r"'([A-Z_]+)'", rule.split("self.name in [", 1)[1])
    return any(name.startswith(p) for p in prefixes) or name in names


def paragraph() -> str:
    return next(p for p in CONTRACT.split("\n\n") if p.startswith("Refused, and dropped"))


def owned(**changes) -> set[str]:
    job = make_job("a").replicas(2)
    if "strategy" in changes:
        job._run()["restartStrategy"] = changes["strategy"]
    if changes.get("torchft"):
        job.obj["spec"]["faultTolerance"] = {"mode": "TorchFT"}
    spec = parse_spec(job.build()["spec"])
    pod = build_worker_pod(JobRef("a", NS, UID), spec, index=0, attempt=0, restarts=0)
    from ddpjob_operator.workers.rendezvous import overridable_defaults

    return {e["name"] for e in pod["spec"]["containers"][0]["env"]} - set(overridable_defaults(spec))


SPECS = [{}, {"strategy": "InPlace"}, {"torchft": True}, {"torchft": True, "strategy": "InPlace"}]


@pytest.mark.parametrize("changes", SPECS, ids=["Recreate", "InPlace", "TorchFT", "TorchFT InPlace"])
def test_every_owned_variable_is_refused_or_named_as_dropped(changes):
    text = paragraph()
    for name in owned(**changes):
        if refused_by_the_crd(name):
            assert f"`{name}`" in text or any(f"`{p}*`" in text for p in ("PET_", "DDPJOB_") if name.startswith(p))
        else:
            assert f"`{name}`" in text.split("dropped", 1)[1], f"{name}: neither refused nor said to be dropped"


def test_the_page_names_as_dropped_only_what_the_crd_does_not_refuse():
    dropped = re.findall(r"`([A-Z_]+)`", paragraph().split("without a word", 1)[1].split("(`rendezvous", 1)[0])
    every = set().union(*(owned(**c) for c in SPECS))
    assert dropped and all(name in every and not refused_by_the_crd(name) for name in dropped), dropped
