"""The benchmark's pure parts: request counting from the API server's metrics page, percentiles, ratios and
verdicts, the trainer join, the demo breakdown parser and the summary table. No cluster.

    .venv/bin/python -m pytest bench/tests -q"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import summary
from ddpjob_localnode.recovery import PHASES, TOTAL, RecoveryClock, TrainerLog

# bench/'s modules come from pytest.ini's pythonpath, as the scripts find each other when run from bench/.
from latency_stats import percentile, summarize
from local_recovery import TOLERANCE_S, check_parts, parse_breakdown, parse_restarts
from operator_scale import ratios, verdicts
from request_counts import RequestCounts, parse_counts
from summary import gang_rows, local_rows, oscillation_rows, scale_rows, trainer_rows
from trainer_summary import join_scaling

ROOT = Path(__file__).resolve().parents[2]

METRICS = """# HELP apiserver_flowcontrol_dispatched_requests_total [BETA] Number of requests executed
# TYPE apiserver_flowcontrol_dispatched_requests_total counter
apiserver_flowcontrol_dispatched_requests_total{flow_schema="ddpjob-bench-operator-writes",priority_level="ddpjob-bench"} 7000
apiserver_flowcontrol_dispatched_requests_total{flow_schema="ddpjob-bench-operator-reads",priority_level="ddpjob-bench"} 9000
apiserver_flowcontrol_dispatched_requests_total{flow_schema="ddpjob-bench-baseline-writes",priority_level="ddpjob-bench"} 3000
apiserver_flowcontrol_dispatched_requests_total{flow_schema="global-default",priority_level="global-default"} 55
"""  # noqa: E501 (exposition-format samples, one per line)


def test_counts_come_from_each_party_flow_schema_only():
    counts = parse_counts(METRICS)
    assert counts["operator"] == RequestCounts(writes=7000, reads=9000)
    assert counts["baseline"] == RequestCounts(writes=3000, reads=0)
    assert (counts["operator"] - RequestCounts(1000, 1000)).total == 14000


@pytest.mark.parametrize(
    "values, q, want",
    [
        ([], 50, None),
        ([3.0], 95, 3.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.0),
        (list(map(float, range(1, 101))), 95, 95.0),
        (list(map(float, range(1, 101))), 100, 100.0),
    ],
)
def test_percentile_is_nearest_rank(values, q, want):
    assert percentile(values, q) == want


def test_summarize_sorts_first():
    assert summarize([5.0, 1.0, 3.0]) == {"count": 3, "p50": 3.0, "p95": 5.0, "max": 5.0}


def _party(p50, p95, mx, total, writes, reads, pods=2, cpu=1.0, rss=50.0):
    return {
        "pods_per_job": pods,
        "timed_out": False,
        "total_seconds": total,
        "apply_to_all_running_seconds": {"p50": p50, "p95": p95, "max": mx},
        "requests_per_job": {"writes": writes, "reads": reads, "total": writes + reads},
        "cpu_seconds": cpu,
        "peak_rss_mib": rss,
    }


@pytest.mark.parametrize(
    "name, op, want_time_met, want_writes_met",
    [
        ("within both aims", _party(1.1, 2.2, 3.3, 10.9, 5.0, 8.0), True, True),
        ("too slow", _party(1.5, 3.0, 4.0, 12.1, 5.0, 8.0), False, True),
        ("one write too many", _party(1.0, 2.0, 3.0, 10.0, 6.0, 8.0), True, False),
    ],
)
def test_verdicts_against_the_aims(name, op, want_time_met, want_writes_met):
    base = _party(1.0, 2.0, 3.0, 10.0, 3.0, 0.0)
    workload = {"operator": op, "baseline": base, "ratio": ratios(op, base)}
    got = verdicts(workload)
    assert (got["time_ratio_met"], got["writes_per_job_met"]) == (want_time_met, want_writes_met), name
    assert got["writes_per_job_aim"] == 5


def test_ratio_without_a_baseline_is_none():
    op, base = _party(1.0, 2.0, 3.0, 10.0, 5.0, 1.0), _party(0.0, 2.0, 3.0, 10.0, 3.0, 0.0)
    assert ratios(op, base)["p50"] is None


def test_summary_rows_say_by_how_much_an_aim_is_missed():
    op, base = _party(1.0, 3.0, 4.0, 15.0, 7.0, 9.0), _party(1.0, 2.0, 3.0, 10.0, 3.0, 0.0)
    workload = {"name": "1000x2", "operator": op, "baseline": base, "ratio": ratios(op, base)}
    workload["aims"] = verdicts(workload)
    rows = scale_rows({"workloads": [workload]})
    assert "missed by 0.40x (36% over)" in rows[0]  # 1.5x against the aim of 1.1x
    assert "missed by 2.0 writes/job" in rows[2]


def test_trainer_rows_report_overhead_verdict():
    rows = trainer_rows(
        {
            "overhead": [
                {
                    "workload": "gpt",
                    "preset": "tiny",
                    "batch_per_rank": 8,
                    "samples_per_second": 95.0,
                    "baseline_samples_per_second": 100.0,
                    "harness_overhead": 0.05,
                },
                {
                    "workload": "cnn",
                    "preset": "tiny",
                    "batch_per_rank": 32,
                    "samples_per_second": 99.0,
                    "baseline_samples_per_second": 100.0,
                    "harness_overhead": 0.01,
                },
            ]
        }
    )
    assert "missed by 2.0 points" in rows[0]
    assert rows[1].endswith("| met |")


def test_scaling_join_matches_accumulation_settings():
    w1 = {
        "results": [
            {"grad_accum_steps": 1, "samples_per_second": 100.0},
            {"grad_accum_steps": 4, "samples_per_second": 100.0},
        ]
    }
    w2 = {
        "results": [
            {"grad_accum_steps": 1, "samples_per_second": 120.0, "micro_batch_per_rank": 8},
            {"grad_accum_steps": 2, "samples_per_second": 150.0, "micro_batch_per_rank": 8},
            {"grad_accum_steps": 4, "samples_per_second": 180.0, "micro_batch_per_rank": 8},
        ]
    }
    rows = join_scaling(w1, w2)
    assert [r["grad_accum_steps"] for r in rows] == [1, 4]
    assert [r["efficiency"] for r in rows] == [0.6, 0.9]


def test_demo_breakdown_is_parsed_and_other_lines_ignored():
    text = """>> summary
  phase            Succeeded  (all 2 pods of attempt 1 succeeded)
  wall time        80.2 s (apply to Succeeded)
  detection          1.25 s
  pod recreation     2.50 s
  rendezvous         3.00 s
  recovery total    12.75 s
"""
    assert parse_breakdown(text) == {
        "detection": 1.25,
        "pod recreation": 2.5,
        "rendezvous": 3.0,
        "recovery total": 12.75,
    }


def _local(**breakdown: float) -> dict:
    return {"breakdown_seconds": {k.replace("_", " "): v for k, v in breakdown.items()}}


@pytest.mark.parametrize(
    "name, local, adds_up",
    [
        ("exact", _local(detection=2.0, pod_recreation=1.0, process_start=9.0, recovery_total=12.0), True),
        ("rounding within the tolerance", _local(detection=2.0, process_start=9.0, recovery_total=11.9), True),
        (
            "a dropped part",
            _local(detection=3.13, pod_recreation=1.53, process_start=20.2, recovery_total=111.58),
            False,
        ),
        ("a part counted twice", _local(detection=5.0, pod_recreation=5.0, recovery_total=5.0), False),
        ("just past the tolerance", _local(detection=2.0, recovery_total=2.0 + TOLERANCE_S + 0.01), False),
    ],
)
def test_local_recovery_row_refuses_parts_that_do_not_add_up_to_the_total(name, local, adds_up):
    if adds_up:
        assert local_rows(local)[0].startswith("| local recovery: kill -9 -> steps advancing |"), name
    else:
        with pytest.raises(ValueError, match="unaccounted for, tolerance 1.0 s"):
            local_rows(local)


def test_local_recovery_without_a_total_is_refused():
    with pytest.raises(ValueError, match="no 'recovery total'"):
        check_parts({"detection": 1.0})


def test_the_recorded_local_recovery_adds_up_to_its_total():
    local = json.loads((ROOT / "bench" / "results" / "local_recovery.json").read_text())
    check_parts(local["breakdown_seconds"])
    assert set(local["breakdown_seconds"]) <= set(PHASES)


def test_every_row_the_recovery_clock_prints_is_read_back_and_adds_up():
    """The demo prints RecoveryClock.breakdown's rows (hack/demo.py: `  {name:<16} {seconds:6.2f} s`); a row
    the parser does not know was once dropped, and 86 s of a 111.6 s total went missing with it."""
    clock = RecoveryClock()
    clock.kill(100.0, step=400)
    attempt = {"metadata": {"labels": {"ddpjob.dev/restart-attempt": "1"}}, "status": {"phase": "Running"}}
    later = {"metadata": {"labels": {"ddpjob.dev/restart-attempt": "2"}}, "status": {"phase": "Running"}}
    clock.observe({"restarts": 1, "attempt": 1, "replicas": 2}, [], 103.0)
    clock.observe({"restarts": 1, "attempt": 1, "replicas": 2}, [attempt] * 2, 104.5)
    clock.observe({"restarts": 2, "attempt": 2, "replicas": 2}, [later] * 2, 150.0)  # attempt 1 never advanced
    trainer = TrainerLog(ready_at=172.0, process_s=20.0, rendezvous_s=0.2, checkpoint_load_s=0.1, first_step_at=173.0)
    rows = clock.breakdown(trainer)
    assert [name for name, _ in rows] == list(PHASES)
    printed = "\n".join(f"  {name:<16} {seconds:6.2f} s" for name, seconds in rows) + "\n  restarts         2\n"
    parsed = parse_breakdown(printed)
    assert list(parsed) == list(PHASES)
    assert parsed["later restarts"] == 45.5 and parsed[TOTAL] == 73.0
    check_parts(parsed)
    assert parse_restarts(printed) == 2


def test_gang_rows_name_the_baseline_and_a_run_that_never_finished():
    setup = {"jobs": 12, "pods_per_job": 4, "gpus_per_pod": 8, "room_for_jobs": 2}
    on = {
        "idle_gpu_seconds": 0.0,
        "all_ran": True,
        "seconds_until_all_ran": 71.0,
        "jobs_ran": 12,
        "jobs": 12,
        "seconds_observed": 71.0,
    }
    off = {
        "idle_gpu_seconds": 11520.0,
        "all_ran": False,
        "seconds_until_all_ran": None,
        "jobs_ran": 0,
        "jobs": 12,
        "seconds_observed": 180.0,
    }
    rows = gang_rows({"gang_on": on, "gang_off": off, "setup": setup, "time_ratio_on_vs_off": None})
    assert "| 0.0 | 11520.0 (gang off) |" in rows[0] and rows[0].endswith("| met |")
    assert "71.0 s" in rows[1] and "not all: 0/12 ran in 180.0 s" in rows[1]


def test_pod_by_pod_rows_compare_the_placement_timeout_with_none():
    setup = {"jobs": 12, "pods_per_job": 4, "gpus_per_pod": 8, "room_for_jobs": 2}
    ran = {
        "idle_gpu_seconds": 900.0,
        "all_ran": True,
        "seconds_until_all_ran": 300.0,
        "jobs_ran": 12,
        "jobs": 12,
        "seconds_observed": 300.0,
        "placement_timeout_seconds": 30,
    }
    stuck = {
        "idle_gpu_seconds": 11520.0,
        "all_ran": False,
        "seconds_until_all_ran": None,
        "jobs_ran": 0,
        "jobs": 12,
        "seconds_observed": 180.0,
        "placement_timeout_seconds": 86400,
    }
    rows = gang_rows(
        {
            "gang_on": ran,
            "gang_off": ran,
            "gang_off_no_timeout": stuck,
            "setup": setup,
            "idle_gpu_seconds_ratio_after_vs_before": 0.078,
        }
    )
    assert "placement timeout 30 s vs none" in rows[2]
    assert "| 3.0 (900.0 GPU-s in 300.0 s) | 64.0 (11520.0 GPU-s in 180.0 s; no timeout" in rows[2]
    assert "| 0.047 |" in rows[2]
    assert rows[3].endswith("| all run | met |") and "not all: 0/12 ran in 180.0 s" in rows[3]


def test_oscillation_rows_hold_the_restarts_to_the_bound():
    run = {"restarts": 1, "running_fraction": 0.93}
    before = {"restarts": 14, "running_fraction": 0.52}
    setup = {"seconds": 300, "toggle_seconds": 20, "elastic": "2..4 pods x 8 GPUs", "baseline_commit": "abc1234"}
    rows = oscillation_rows(
        {"setup": setup, "baseline": before, "this_tree": run, "restart_bound": 2, "restarts_ratio": 0.071}
    )
    assert "| 1 | 14 (before the settling rules, abc1234) | 0.071 | <= 2 | met |" in rows[0]
    assert "| 93% | 52% |" in rows[1]
    rows = oscillation_rows(
        {
            "setup": setup,
            "baseline": before,
            "this_tree": {**run, "restarts": 3},
            "restart_bound": 2,
            "restarts_ratio": None,
        }
    )
    assert rows[0].endswith("| missed |")


def test_estimate_rows_compare_idle_and_after_an_event_with_the_baseline():
    from summary import estimate_rows

    est = {
        "setup": {"nodes": 1000, "bound_pods": 10000, "baseline": "git abc^"},
        "baseline": {"median_ms": 20.0, "after_one_pod_event_median_ms": 21.0},
        "this tree": {"median_ms": 3.0, "after_one_pod_event_median_ms": 5.0},
        "ratio": 0.15,
        "ratio_after_one_pod_event": 0.238,
    }
    rows = estimate_rows(est)
    assert "1,000 nodes / 10,000 bound pods, nothing changed | 3.00 ms | 20.00 ms (git abc^) | 0.150 |" in rows[0]
    assert "| same, right after one pod event | 5.00 ms | 21.00 ms | 0.238 |" in rows[1]
    del est["baseline"]["after_one_pod_event_median_ms"]
    assert len(estimate_rows(est)) == 1, "an older baseline run has no per-event figure"


def test_the_benchmarks_page_shows_the_table_the_results_give():
    """docs/benchmarks.md's table is generated from bench/results (make bench rewrites it): a pasted or stale
    table fails here."""
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    assert summary.BEGIN in page and summary.END in page
    assert summary.table_in(page) == summary.render(ROOT / "bench" / "results")


def test_the_summary_block_is_replaced_in_place():
    page = f"intro\n{summary.BEGIN}\nold table\n{summary.END}\noutro\n"
    assert summary.with_table(page, "| new |\n") == f"intro\n{summary.BEGIN}\n| new |\n{summary.END}\noutro\n"
    with pytest.raises(ValueError, match="SUMMARY:BEGIN"):
        summary.with_table("no markers", "| new |\n")


def test_kueue_rows_compare_with_kueues_own_job_path_and_say_a_miss():
    from summary import kueue_rows

    queue = {
        "setup": {"jobs": 100, "pods_per_job": 2, "gpus_per_pod": 8, "quota_jobs": 10, "run_seconds": 10},
        "operator_ddpjob": {"handoff_p50_seconds": 3.0, "handoff_p95_seconds": 2.0, "makespan_seconds": 120.0},
        "baseline_batch_job": {"handoff_p50_seconds": 2.0, "handoff_p95_seconds": 2.0, "makespan_seconds": 120.0},
        "handoff_p50_ratio": 1.5,
        "handoff_p95_ratio": 1.0,
        "makespan_ratio": 1.0,
    }
    p50, p95, makespan = kueue_rows(queue)
    assert "Kueue's batch/v1 Job" in p50 and "missed by 0.30x (25% over)" in p50
    assert p95.endswith("| met |") and makespan.endswith("| met |")


def test_progress_rows_hold_writes_to_the_budget_and_staleness_to_its_bound():
    pw = {
        "jobs": 1000,
        "scrape_seconds": 10,
        "settle_seconds": 240,
        "writes_ratio_after_vs_before": 0.2,
        "before": {
            "commit": "af53123",
            "writes_per_second": 95.0,
            "step_staleness_seconds": {"p50": 20.0, "p95": 60.0, "max": 90.0},
        },
        "after": {"writes_per_second": 19.0, "step_staleness_seconds": {"p50": 15.0, "p95": 30.0, "max": 75.0}},
    }
    writes, stale = summary.progress_rows(pw)
    assert "| 19.0 | 95.0 (af53123) | 0.20 |" in writes and writes.endswith("| met |")
    assert "75.0 s" in stale and stale.endswith("missed by 5.00 s |")


def test_deletion_rows_name_the_earlier_tree_measured_in_the_same_run():
    case = {"seconds": 8.0, "finished": True, "restarts_counted": 0, "party": "operator"}
    after = {
        "setup": {"jobs": 100, "pods_per_job": 2},
        "operator_namespace": case,
        "baseline_namespace": {**case, "seconds": 6.0},
        "operator_delete_all_jobs": case,
        "namespace_ratio_vs_baseline": 1.33,
        "before_namespace": {**case, "seconds": 12.0, "party": "before-af53123"},
        "before_ratio_vs_baseline": 2.0,
    }
    first = summary.deletion_rows(after, None)[0]
    assert "before-af53123 in the same run: 12.0 s, 2.00x" in first and "| 8.0 s | 6.0 s" in first


def test_recovery_modes_reads_the_group_that_trains_after_the_fault():
    from recovery_modes import after_restart

    lines = [(1.0, 100), (2.0, 105), (3.0, 110), (9.0, 110), (10.0, 115)]
    # The old process logged 110 after the fault at 2.5; the new one started at 8 and resumed at the checkpoint.
    assert after_restart(lines, [0.0, 8.0], at=2.5) == [(9.0, 110), (10.0, 115)]
    assert after_restart(lines, [0.0], at=2.5) == [], "no process started since: nothing trains again yet"


def test_recovery_modes_on_real_nodes_runs_the_trainer_image_at_the_size_two_nodes_hold(monkeypatch):
    import recovery_modes

    nodes = recovery_modes.RealNodes()
    nodes.image = "localhost/ddpjob/ddp-trainer:abc"
    monkeypatch.setattr(recovery_modes, "NODES", nodes)
    job = recovery_modes.manifest("InPlace", steps=300)
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    assert (spec["replicas"], spec["elastic"]) == (2, {"minReplicas": 1, "maxReplicas": 2})
    assert pod["nodeSelector"] == {"ddpjob.dev/real-node": "true"}
    assert {"key": "ddpjob.dev/real-node", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["containers"][0]["image"] == nodes.image and pod["containers"][0]["imagePullPolicy"] == "Never"
    (volume,) = [v for v in pod["volumes"] if v["name"] == "checkpoints"]
    assert volume["hostPath"]["path"] == str(recovery_modes.REAL_CHECKPOINTS)
    # The local nodes keep the shape of the table before: 3 pods, elastic 2..3, the example's local-node placement.
    monkeypatch.setattr(recovery_modes, "NODES", recovery_modes.LocalNodes())
    local = recovery_modes.manifest("InPlace", steps=300)
    assert (local["spec"]["replicas"], local["spec"]["elastic"]) == (3, {"minReplicas": 2, "maxReplicas": 3})
    assert local["spec"]["template"]["spec"]["nodeSelector"] == {"ddpjob.dev/local-node": "true"}


def test_restart_all_containers_compares_a_pod_with_the_rule_to_one_without():
    from restart_all_containers import NODE, exiter_pod

    ruled = exiter_pod("in-place", [3])
    (container,) = ruled["spec"]["containers"]
    assert container["restartPolicy"] == "Never" and ruled["spec"]["restartPolicy"] == "Never"
    assert container["restartPolicyRules"] == [
        {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [3]}}
    ]
    plain = exiter_pod("recreated", None)
    assert "restartPolicyRules" not in plain["spec"]["containers"][0]
    # Both go through the scheduler onto the same real node, so the rule's NodeDeclaredFeatures filter applies.
    for pod in (ruled, plain):
        assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": NODE} and "nodeName" not in pod["spec"]
