"""Requests each benchmark party sent, as the API server counted them (APF's dispatched-requests counter,
labelled by the FlowSchema that matched: one for the party's writes, one for the rest)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from bench_cluster import PARTIES, flow_schema_name

DISPATCHED = "apiserver_flowcontrol_dispatched_requests_total"


@dataclass(frozen=True)
class RequestCounts:
    writes: float
    reads: float

    @property
    def total(self) -> float:
        return self.writes + self.reads

    def __sub__(self, other: RequestCounts) -> RequestCounts:
        return RequestCounts(self.writes - other.writes, self.reads - other.reads)


def parse_counts(metrics_text: str) -> dict[str, RequestCounts]:
    by_schema: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == DISPATCHED:
                schema = sample.labels.get("flow_schema", "")
                by_schema[schema] = by_schema.get(schema, 0.0) + sample.value
    return {
        party: RequestCounts(
            by_schema.get(flow_schema_name(party, "writes"), 0.0), by_schema.get(flow_schema_name(party, "reads"), 0.0)
        )
        for party in PARTIES
    }
