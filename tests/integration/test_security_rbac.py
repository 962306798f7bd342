"""The operator never needs secrets, pods/exec or any other way into a pod or onto a node: no rendering of the
chart (cluster-wide or single-namespace, with or without the HA standby) grants it, and the operator's own
code never calls such an API. tests/chart/test_rbac_by_use.py checks the same against a live token."""

from __future__ import annotations

import re
from pathlib import Path

import pytest


from support.chart_tools import render

OPERATOR_SRC = Path(__file__).resolve().parents[2] / "operator" / "src" / "ddpjob_operator"
NEVER_RESOURCES = {"secrets", "pods/exec", "pods/attach", "pods/portforward", "pods/proxy", "nodes/proxy",
                   "serviceaccounts/token", "pods/ephemeralcontainers", "*"}
NEVER_VERBS = {"*", "escalate", "bind", "impersonate"}
RENDERINGS = {
    "cluster-wide": {},
    "single-namespace": {"singleNamespace": "true", "watchNamespace": "team-a"},
    "cluster-wide-ha": {"ha.enabled": "true"},
    "single-namespace-ha": {"singleNamespace": "true", "watchNamespace": "team-a", "ha.enabled": "true"},
}


def rules(values: dict[str, str]) -> list[dict]:
    docs = render(values)
    return [rule for doc in docs if doc["kind"] in ("ClusterRole", "Role") for rule in doc.get("rules") or []]


@pytest.mark.parametrize("values", RENDERINGS.values(), ids=RENDERINGS.keys())
def test_no_rendering_grants_secrets_exec_or_wildcards(values):
    found = rules(values)
    assert found, "the chart renders no RBAC rules"
    for rule in found:
        assert not NEVER_RESOURCES & set(rule.get("resources") or []), rule
        assert not NEVER_VERBS & set(rule.get("verbs") or []), rule
        assert "*" not in (rule.get("apiGroups") or []), rule
        if "nodes" in rule.get("resources", []):
            assert set(rule["verbs"]) <= {"get", "list", "watch"}, f"nodes are only read: {rule}"
        assert not {"roles", "clusterroles", "rolebindings", "clusterrolebindings"} & set(rule.get("resources") or [])


# The client's calls: read_namespaced_secret, list_secret_for_all_namespaces, connect_get_namespaced_pod_exec,
# kubernetes.stream.stream(...), portforward. A pod spec's `imagePullSecrets` field (copied into the Lighthouse pod)
# is no call.
CALLS = re.compile(r"(_secret|secret_|connect_\w*exec|connect_\w*attach|stream\(|portforward)", re.I)


@pytest.mark.parametrize("line, found", [
    ("core.read_namespaced_secret(name, ns)", True),
    ("core.list_secret_for_all_namespaces()", True),
    ("core.connect_get_namespaced_pod_exec(name, ns)", True),
    ("stream(core.connect_get_namespaced_pod_exec, name, ns)", True),
    ('for k in ("nodeSelector", "imagePullSecrets")', False),
])
def test_the_call_pattern_tells_a_call_from_a_field(line, found):
    assert bool(CALLS.search(line)) is found


def test_operator_code_calls_no_secret_or_exec_api():
    offenders = [f"{path.name}:{n}: {line.strip()}" for path in sorted(OPERATOR_SRC.glob("*.py"))
                 for n, line in enumerate(path.read_text().splitlines(), 1) if CALLS.search(line)]
    assert offenders == []
