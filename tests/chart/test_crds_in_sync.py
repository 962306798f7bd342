"""The chart's crds/ is a copy of the single-source crds/ (hack/sync-chart-crds.sh); drift fails here."""

from __future__ import annotations

import yaml

from support.chart_tools import CHART, ROOT

SOURCE = ROOT / "crds"
COPY = CHART / "crds"
# The chart's own addition: kopf's peering CRDs for ha.enabled, which have no top-level source.
CHART_ONLY = {"kopf.dev_peerings.yaml"}


def test_every_source_crd_is_copied_byte_for_byte():
    sources = sorted(SOURCE.glob("*.yaml"))
    assert sources, f"no CRDs in {SOURCE}"
    for src in sources:
        copy = COPY / src.name
        assert copy.exists(), f"{copy} is missing: run hack/sync-chart-crds.sh"
        assert copy.read_bytes() == src.read_bytes(), f"{copy} drifted from {src}: run hack/sync-chart-crds.sh"


def test_the_chart_has_no_stale_crds():
    extra = {p.name for p in COPY.glob("*.yaml")} - {p.name for p in SOURCE.glob("*.yaml")} - CHART_ONLY
    assert not extra, f"chart CRDs without a source in crds/: {sorted(extra)}"


def test_chart_crds_are_crds():
    for path in COPY.glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            assert doc["kind"] == "CustomResourceDefinition", path
