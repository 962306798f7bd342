"""The PromQL metric-name reader the scrape test relies on: if it missed names, that test would prove nothing."""

from __future__ import annotations

import pytest

from promql_names import grafana_query_names, metric_names, rule_metric_names

CASES = [
    ("plain", "up", {"up"}),
    ("selector and range", 'rate(ddpjob_pods_created_total{reason="x, y"}[5m])', {"ddpjob_pods_created_total"}),
    ("grouping labels are not metrics", "sum by (namespace, job) (ddp_trainer_loss) / on (job) group_left () b",
     {"ddp_trainer_loss", "b"}),
    ("histogram suffixes kept as scraped",
     "histogram_quantile(0.9, sum by (le) (rate(x_seconds_bucket[$__rate_interval])))", {"x_seconds_bucket"}),
    ("numbers, durations, keywords", "a > 1.5e3 and b offset 5m or c > bool 0", {"a", "b", "c"}),
    ("grafana variables in matchers", 'ddp_trainer_step{namespace=~"$namespace"}', {"ddp_trainer_step"}),
    ("time() is a function", "time() - max(ddp_trainer_last_checkpoint_timestamp_seconds)",
     {"ddp_trainer_last_checkpoint_timestamp_seconds"}),
    ("recording rule names", "ddpjob:x:mean5m > 2", {"ddpjob:x:mean5m"}),
]


@pytest.mark.parametrize("expr,want", [(e, w) for _, e, w in CASES], ids=[n for n, _, _ in CASES])
def test_metric_names(expr, want):
    assert metric_names(expr) == want


def test_label_values_query():
    assert grafana_query_names('label_values(ddp_trainer_step{namespace=~"$namespace"}, job)') == {"ddp_trainer_step"}


def test_recording_rules_resolve_to_what_they_read():
    rules = {"groups": [{"name": "g", "rules": [
        {"record": "ddpjob:a:rate", "expr": "rate(raw_total[5m])"},
        {"alert": "A", "expr": "ddpjob:a:rate > on (job) group_left () other"}]}]}
    assert rule_metric_names(rules) == {"raw_total", "other"}
