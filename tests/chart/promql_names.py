"""Metric names a PromQL expression reads, so a test can check each one against a real Prometheus scrape.
Not a full PromQL parser: it drops what cannot be a metric name (strings, label matchers, ranges, grouping
label lists, numbers and durations, functions, keywords) and keeps the identifiers that are left."""

from __future__ import annotations

import re

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
            "offset", "inf", "nan", "atan2", "start", "end"}
_STRINGS = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_TOKENS = re.compile(r"(?P<num>\d[\w.]*)|(?P<id>[A-Za-z_:][\w:]*)(?P<call>\s*\()?|(?P<other>.)", re.S)
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?P<metric>[A-Za-z_:][\w:]*)")


def metric_names(expr: str) -> set[str]:
    text = _STRINGS.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for token in _TOKENS.finditer(text):
        ident = token.group("id")
        if ident and not token.group("call") and ident.lower() not in KEYWORDS:
            names.add(ident)
    return names


def grafana_query_names(query: str) -> set[str]:
    """A Grafana template-variable query: `label_values(metric{...}, label)` or plain PromQL."""
    found = _LABEL_VALUES.match(query)
    return {found.group("metric")} if found else metric_names(query)


def dashboard_exprs(dashboard: dict) -> list[str]:
    exprs: list[str] = []

    def walk(panels):
        for panel in panels:
            exprs.extend(t["expr"] for t in panel.get("targets", []) if t.get("expr"))
            walk(panel.get("panels", []))

    walk(dashboard.get("panels", []))
    return exprs


def dashboard_metric_names(dashboard: dict) -> set[str]:
    names = set().union(*(metric_names(e) for e in dashboard_exprs(dashboard)))
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            names |= grafana_query_names(query)
    return names


def rule_metric_names(rule_file: dict) -> set[str]:
    """Raw metric names read by all rules; recording-rule outputs are replaced by what they read."""
    rules = [r for g in rule_file["groups"] for r in g["rules"]]
    recorded = {r["record"]: metric_names(r["expr"]) for r in rules if "record" in r}
    names: set[str] = set()
    for rule in rules:
        for name in metric_names(rule["expr"]):
            names |= recorded.get(name, {name})
    return names
