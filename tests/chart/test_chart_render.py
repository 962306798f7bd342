"""`helm lint --strict`, `helm template` with the defaults and with every feature on, and the schema rejecting
bad values. Pure rendering: no cluster."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from support.chart_tools import ALL_FEATURES, CHART, find, helm, one, render, set_flags


def test_helm_lint_strict_defaults_and_all_features():
    for values in ({}, ALL_FEATURES, {**ALL_FEATURES, "singleNamespace": "true"}):
        result = helm("lint", "--strict", str(CHART), *set_flags(values), check=False)
        assert result.returncode == 0, result.stdout + result.stderr


def test_defaults_render_only_the_core_and_no_monitoring():
    kinds = sorted(d["kind"] for d in render())
    # The Job is the pre-delete hook that stops the jobs' pods on `helm uninstall` (uninstall.releasePods).
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "Deployment", "Job", "Service", "ServiceAccount",
                     "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    hook = next(d for d in render() if d["kind"] == "Job")
    assert hook["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    assert "Job" not in {d["kind"] for d in render({"uninstall.releasePods": "false"})}


def test_the_queue_label_policy_is_the_local_clusters_one_named_per_release():
    """One source (files/queue-label-policy/): the chart renders it under the release's name, rule unchanged."""
    source = yaml.safe_load((CHART / "files" / "queue-label-policy" / "policy.yaml").read_text())
    policy, binding = (d for d in render() if d["kind"].startswith("ValidatingAdmissionPolicy"))
    assert policy["spec"] == source["spec"]
    assert policy["metadata"]["name"] == binding["metadata"]["name"] == binding["spec"]["policyName"]
    assert policy["metadata"]["name"].endswith("-queue-label")
    assert not [d for d in render({"queueLabelPolicy": "false"}) if d["kind"].startswith("ValidatingAdmission")]


def test_every_feature_on_renders_every_kind():
    kinds = {d["kind"] for d in render(ALL_FEATURES)}
    assert kinds >= {"ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap", "NetworkPolicy",
                     "ClusterKopfPeering", "Deployment", "ClusterRole"}


def test_deployment_is_pod_security_restricted_with_liveness_and_recreate():
    deploy = one(render(), "Deployment")
    spec = deploy["spec"]
    assert spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "liveness"}
    assert container["resources"]["limits"]["memory"] == "512Mi"
    assert "--all-namespaces" in container["args"]
    assert "--metrics-port=8080" in container["args"] and "--liveness-port=8081" in container["args"]


def test_single_namespace_uses_a_role_in_the_watched_namespace():
    docs = render({"singleNamespace": "true", "watchNamespace": "team-a"})
    role = one(docs, "Role")
    assert role["metadata"]["namespace"] == "team-a"
    assert one(docs, "RoleBinding")["subjects"][0]["namespace"] == "ddpjob-system"
    assert "--namespace=team-a" in one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    cluster_resources = {r for rule in one(docs, "ClusterRole")["rules"] for r in rule["resources"]}
    assert cluster_resources == {"customresourcedefinitions", "namespaces", "nodes", "resourceflavors",
                                 "priorityclasses"}, cluster_resources


def test_rbac_never_grants_secrets_exec_or_wildcards():
    for values in ({}, {"singleNamespace": "true"}, ALL_FEATURES):
        docs = render(values)
        for role in find(docs, "ClusterRole") + find(docs, "Role"):
            for rule in role["rules"]:
                assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
                assert not {"secrets", "pods/exec", "pods/attach", "pods/log"} & set(rule["resources"]), rule
                if "nodes" in rule["resources"]:
                    assert rule["verbs"] == ["list", "watch"], rule


def test_every_rbac_rule_carries_a_comment_saying_why():
    text = (CHART / "templates" / "rbac.yaml").read_text()
    rule_lines = [i for i, line in enumerate(text.splitlines()) if line.startswith("- apiGroups:")]
    lines = text.splitlines()
    for i in rule_lines:
        assert lines[i - 1].lstrip().startswith("#"), f"rbac.yaml line {i + 1} has no comment: {lines[i]}"


def test_ha_runs_a_standby_with_a_lower_kopf_priority():
    docs = render({"ha.enabled": "true"})
    deployments = {d["metadata"]["name"]: d for d in find(docs, "Deployment")}
    assert set(deployments) == {"ddpjob-ddpjob-operator", "ddpjob-ddpjob-operator-standby"}
    args = {name: d["spec"]["template"]["spec"]["containers"][0]["args"] for name, d in deployments.items()}
    assert "--priority=100" in args["ddpjob-ddpjob-operator"]
    assert "--priority=50" in args["ddpjob-ddpjob-operator-standby"]
    assert all("--peering=ddpjob-ddpjob-operator" in a for a in args.values())
    assert one(docs, "ClusterKopfPeering")["metadata"]["name"] == "ddpjob-ddpjob-operator"


def test_ha_rejects_a_standby_priority_that_is_not_lower():
    result = helm("template", "x", str(CHART), "--set", "ha.enabled=true", "--set", "ha.standbyPriority=100",
                  check=False)
    assert result.returncode != 0
    assert "ha.priority must be higher than ha.standbyPriority" in result.stderr


@pytest.mark.parametrize("flag,message", [
    ("singelNamespace=true", "at '': additional properties 'singelNamespace' not allowed"),
    ("metrics.serviceMonitor.enabeld=true",
     "at '/metrics/serviceMonitor': additional properties 'enabeld' not allowed"),
    ("rbac.create=yes", "at '/rbac/create': got string, want boolean"),
    ("metrics.port=http", "at '/metrics/port': got string, want integer"),
    ("image.pullPolicy=Sometimes", "at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'"),
    ("prometheusRule.restartStormWindow=30 minutes", "at '/prometheusRule/restartStormWindow': '30 minutes' does not match pattern"),
    ("prometheusRule.stragglerFactor=1", "at '/prometheusRule/stragglerFactor': exclusiveMinimum: got 1, want 1"),
])
def test_schema_rejects_typos_and_wrong_types(flag, message):
    set_kind = "--set-string" if flag.startswith(("rbac.", "metrics.port")) else "--set"
    result = helm("template", "x", str(CHART), set_kind, flag, check=False)
    assert result.returncode != 0, f"{flag} was accepted"
    assert "values don't meet the specifications of the schema" in result.stderr
    assert message in result.stderr, result.stderr


def test_every_value_has_a_one_line_comment():
    # A value is a key whose schema has no nested properties (a leaf, or a free-form map like resources);
    # groups such as `metrics:` need no comment of their own.
    schema = json.loads((CHART / "values.schema.json").read_text())
    lines = (CHART / "values.yaml").read_text().splitlines()
    stack: list[tuple[int, dict]] = [(-1, schema)]
    checked = 0
    for i, line in enumerate(lines):
        key = re.match(r"^(\s*)([A-Za-z][\w]*):", line)
        if not key:
            continue
        indent = len(key.group(1))
        while stack[-1][0] >= indent:
            stack.pop()
        node = stack[-1][1].get("properties", {}).get(key.group(2))
        if node is None:
            continue  # inside a free-form default (e.g. resources.requests.cpu)
        stack.append((indent, node))
        if "properties" not in node:
            checked += 1
            assert lines[i - 1].strip().startswith("#"), f"values.yaml:{i + 1} `{line.strip()}` has no comment"
    assert checked >= 40


def test_schema_covers_every_value():
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(node, sch, path):
        props = sch.get("properties")
        if not isinstance(node, dict) or props is None:
            return
        for key, child in node.items():
            assert key in props, f"values.yaml {path}{key} is missing from values.schema.json"
            walk(child, props[key], f"{path}{key}.")

    walk(values, schema, "")


def test_monitoring_objects_select_the_operator_and_trainer_pods():
    docs = render(ALL_FEATURES)
    sm = one(docs, "ServiceMonitor")
    svc = one(docs, "Service")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"][0]["port"] == svc["spec"]["ports"][0]["name"] == "metrics"
    pm = one(docs, "PodMonitor")
    assert pm["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "ddpjob", "app.kubernetes.io/component": "worker",
        "app.kubernetes.io/managed-by": "ddpjob-operator"}
    assert pm["spec"]["podMetricsEndpoints"][0]["honorLabels"] is False  # trainers' `ddpjob` collides with nothing
    cm = one(docs, "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["ddpjob.json"])["uid"] == "ddpjob-overview"


def worker_policy_ports_from_the_operator(docs: list[dict]) -> set[int]:
    """Every port the chart's worker NetworkPolicy admits from the operator's pods."""
    policy = next(d for d in find(docs, "NetworkPolicy") if d["metadata"]["name"].endswith("-workers"))
    ports: set[int] = set()
    for rule in policy["spec"]["ingress"]:
        froms_operator = any(
            (peer.get("podSelector") or {}).get("matchLabels", {}).get("app.kubernetes.io/component") == "operator"
            for peer in rule.get("from") or [])
        for port in rule.get("ports") or []:
            if froms_operator:
                ports |= set(range(port["port"], port.get("endPort", port["port"]) + 1))
    return ports


def test_the_worker_policy_admits_the_operator_on_every_port_it_reads():
    """The ports come from the operator's own constants, as its per-job policy (builders.build_network_policy) opens
    them: every trainer process's metrics port, and the InPlace agent's restart count, without which counting fell
    back to worker 0 alone (issue 54, defect 7)."""
    from ddpjob_operator import api
    from ddpjob_operator.workers.builders import TRAINER_METRICS_PORTS

    want = {*range(TRAINER_METRICS_PORTS[0], TRAINER_METRICS_PORTS[1] + 1), api.AGENT_METRICS_PORT}
    ports = worker_policy_ports_from_the_operator(render({"networkPolicy.enabled": "true"}))
    assert want - ports == set(), f"blocked: {sorted(want - ports)}"
