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
    assert columns == ["Phase", "Size", "Ready", "Restarts", "WorldSize", "Reason", "Age", "Step", "Attempt",
                       "Placement"]
    assert version["subresources"]["scale"] == {"specReplicasPath": ".spec.replicas",
                                                "statusReplicasPath": ".status.replicas",
                                                "labelSelectorPath": ".status.selector"}


def test_cel_rules_cover_the_issue():
    text = CRD.read_text()
    for needle in ("spec.replicas must be within", "minReplicas must be <=", "spec.rendezvous.port is immutable",
                   "is set by the operator", "spec.template may only change while the job is suspended",
                   "spec.nprocPerNode must be an integer"):
        assert needle in text, needle
