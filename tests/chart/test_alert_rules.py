"""The chart's alert rules, checked and unit-tested by promtool (Debian's prometheus package): each alert fires
on synthetic series of a broken job and stays silent on healthy ones."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from support.chart_tools import binary, rule_groups

FIXTURES = Path(__file__).parent / "fixtures"
ALERTS = {"DDPJobFailed", "DDPJobRestartStorm", "DDPJobNoTrainingProgress", "DDPJobStragglerRank"}


@pytest.fixture(scope="module")
def rules_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rules")
    (out / "rules.yaml").write_text(yaml.safe_dump(rule_groups(), sort_keys=False))
    shutil.copy(FIXTURES / "alerts-promtool-tests.yaml", out / "tests.yaml")
    return out


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([binary("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_rendered_rules_pass_promtool_check(rules_dir):
    result = promtool("check", "rules", "rules.yaml", cwd=rules_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_every_issue_alert_exists_and_each_has_a_promtool_case():
    alerts = {r["alert"] for g in rule_groups()["groups"] for r in g["rules"] if "alert" in r}
    assert alerts == ALERTS
    tested = {case["alertname"] for t in yaml.safe_load((FIXTURES / "alerts-promtool-tests.yaml").read_text())["tests"]
              for case in t.get("alert_rule_test", [])}
    assert tested == ALERTS


def test_alerts_fire_on_broken_jobs_and_stay_silent_on_healthy_ones(rules_dir):
    result = promtool("test", "rules", "tests.yaml", cwd=rules_dir)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_can_fail(rules_dir, tmp_path):
    # Guard against a vacuous suite: a threshold no restart storm reaches must make the storm case fail.
    strict = rule_groups({"prometheusRule.restartStormThreshold": "100"})
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(strict, sort_keys=False))
    shutil.copy(rules_dir / "tests.yaml", tmp_path / "tests.yaml")
    result = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert result.returncode != 0
    assert "DDPJobRestartStorm" in result.stdout + result.stderr


def test_threshold_values_reach_the_rendered_expressions():
    groups = rule_groups({"prometheusRule.noProgressMinutes": "25", "prometheusRule.stragglerFactor": "3",
                          "prometheusRule.restartStormWindow": "2h"})["groups"]
    rules = {r.get("alert") or r["record"]: r for g in groups for r in g["rules"]}
    assert rules["DDPJobNoTrainingProgress"]["for"] == "25m"
    assert "3 * quantile" in rules["DDPJobStragglerRank"]["expr"]
    assert "[2h]" in rules["DDPJobRestartStorm"]["expr"]
