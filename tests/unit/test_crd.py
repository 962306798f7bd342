"""The CRD file itself: every field documented (so `kubectl explain` reads well), the printer columns, the scale
subresource, and CEL rules for each rule the issue asks for. The API server's verdicts are in
tests/integration/test_api_validation.py."""

from __future__ import annotations

from pathlib import Path

import yaml

CRD = Path(__file__).resolve().parents[2] / "crds" / "ddpjob.dev_ddpjobs.yaml"


def load():
    crd = yaml.safe_load(CRD.read_text())
    return crd, crd["spec"]["versions"][0]


def walk(schema, path="spec"):
    yield path, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from walk(sub, f"{path}.{name}")
    if "items" in schema:
        yield from walk(schema["items"], f"{path}[]")


def test_names_and_scope():
    crd, version = load()
    assert crd["metadata"]["name"] == "ddpjobs.ddpjob.dev"
    assert crd["spec"]["names"]["shortNames"] == ["ddpj"]
    assert crd["spec"]["scope"] == "Namespaced"
    assert version["name"] == "v1alpha1"


def test_every_spec_and_status_field_has_a_description():
    _, version = load()
    props = version["schema"]["openAPIV3Schema"]["properties"]
    missing = [path for root in ("spec", "status") for path, schema in walk(props[root], root)
               if not schema.get("description") and not path.endswith("[]")]
    assert missing == []


def test_printer_columns_and_scale():
    _, version = load()
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["Phase", "Size", "Ready", "Progress", "Restarts", "Disruptions", "WorldSize", "Reason", "Age", "Step", "Attempt",
                       "Queue", "Placement"]
    assert version["subresources"]["scale"] == {"specReplicasPath": ".spec.replicas",
                                                "statusReplicasPath": ".status.replicas",
                                                "labelSelectorPath": ".status.selector"}


def test_cel_rules_cover_the_issue():
    text = CRD.read_text()
    for needle in ("spec.replicas must be within", "minReplicas must be <=", "spec.rendezvous.port is immutable",
                   "is set by the operator", "spec.template may only change while the job is suspended",
                   "spec.nprocPerNode must be an integer",
                   "containerPort 9399 is where each pod's torchrun agent serves"):
        assert needle in text, needle


def spec_rule(needle: str) -> dict:
    _, version = load()
    rules = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"]
    return next(r for r in rules if needle in message_of(r))


def message_of(rule: dict) -> str:
    return rule.get("messageExpression") or rule["message"]


def test_the_port_clash_rule_uses_the_trainers_metrics_ports():
    """CEL cannot import the constants, so the numbers it spells are held equal to the code's here."""
    from ddp_trainer.metrics import DEFAULT_PORT
    from ddpjob_operator.workers.builders import TRAINER_METRICS_PORTS

    rule = spec_rule("clashes with the metrics ports")
    most = TRAINER_METRICS_PORTS[1] - TRAINER_METRICS_PORTS[0] + 1  # the processes a pod may run (nprocPerNode <= 64)
    assert TRAINER_METRICS_PORTS[0] == DEFAULT_PORT
    assert f"self.rendezvous.port < {DEFAULT_PORT}" in rule["rule"]
    assert f"self.rendezvous.port >= {DEFAULT_PORT} + (" in rule["rule"]
    assert f": {most}))" in rule["rule"], "nprocPerNode auto without gpusPerReplica: up to 64 processes"
    assert "pick a port outside 9400" in message_of(rule)


def test_the_nproc_rule_names_both_fields_and_the_fix():
    rule = spec_rule("(one trainer process per GPU)")
    assert "self.nprocPerNode <= self.gpusPerReplica" in rule["rule"]
    assert "lower nprocPerNode, raise gpusPerReplica, or set nprocPerNode: auto" in message_of(rule)


def test_shm_and_grace_defaults_match_the_operators():
    from ddpjob_operator.state.spec import DEFAULT_GRACE_SECONDS, DEFAULT_SHM_SIZE

    _, version = load()
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["shmSize"]["default"] == DEFAULT_SHM_SIZE
    assert "spec.shmSize must be a non-negative Kubernetes quantity" in spec["shmSize"]["x-kubernetes-validations"][0][
        "message"]
    assert f"terminationGracePeriodSeconds to {DEFAULT_GRACE_SECONDS} unless" in spec["template"]["description"]
