"""The benchmark table, from bench/results/*.json: each figure next to its baseline and its aim, and by how much
an aim is missed. It is printed (bench/run.sh keeps it as bench/results/summary.md) and, with --docs, written
into that page between its SUMMARY markers: docs/benchmarks.md's table is generated, never pasted, and
bench/tests/test_bench_pure.py fails when the page and the results disagree.

    python bench/summary.py [--results bench/results] [--docs docs/benchmarks.md]"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from local_recovery import TOTAL, check_parts
from trainer_summary import load_trainer


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def _s(value, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _bound_verdict(value: float | None, aim: float, unit: str) -> str:
    if value is None:
        return "not measured"
    return "met" if value <= aim else f"missed by {value - aim:.2f} {unit}"


def _ratio_verdict(ratio: float | None, aim: float) -> str:
    if ratio is None:
        return "not measured"
    return "met" if ratio <= aim else f"missed by {ratio - aim:.2f}x ({100 * (ratio / aim - 1):.0f}% over)"


def scale_rows(scale: dict) -> list[str]:
    rows = []
    for w in scale["workloads"]:
        op, base, ratio, aims = w["operator"], w["baseline"], w["ratio"], w["aims"]
        time_aim = aims.get("time_ratio_aim", 1.2)
        lo, lb = op["apply_to_all_running_seconds"], base["apply_to_all_running_seconds"]
        cut = " (cut short)" if op["timed_out"] or base["timed_out"] else ""
        name = w["name"]
        rows.append(
            f"| {name} apply -> all Running, total{cut} | {_s(op['total_seconds'])} s | "
            f"{_s(base['total_seconds'])} s | {ratio['total']}x | <= {time_aim}x | "
            f"{_ratio_verdict(ratio['total'], time_aim)} |"
        )
        rows.append(
            f"| {name} per job p50 / p95 / max | {_s(lo['p50'])} / {_s(lo['p95'])} / {_s(lo['max'])} s | "
            f"{_s(lb['p50'])} / {_s(lb['p95'])} / {_s(lb['max'])} s | {ratio['p50']} / {ratio['p95']} / "
            f"{ratio['max']}x | <= {time_aim}x | {_ratio_verdict(ratio['p95'], time_aim)} (p95) |"
        )
        writes, aim = op["requests_per_job"]["writes"], aims["writes_per_job_aim"]
        verdict = "met" if aims["writes_per_job_met"] else f"missed by {writes - aim:.1f} writes/job"
        rows.append(
            f"| {name} API writes per job | {_s(writes)} | {_s(base['requests_per_job']['writes'])} | "
            f"{ratio['writes_per_job']}x | <= {aim} (pods + 3) | {verdict} |"
        )
        total = op["requests_per_job"]["total"]
        rows.append(
            f"| {name} API requests per job (reads + writes) | {_s(total)} ({_s(op['requests_per_job']['reads'])} "
            f"reads) | {_s(base['requests_per_job']['total'])} | {ratio['requests_per_job']}x | <= {aim} (pods + 3) | "
            f"{_bound_verdict(total, aim, 'requests/job')} |"
        )
        rows.append(
            f"| {name} peak RSS / CPU seconds | {_s(op['peak_rss_mib'], 0)} MiB / {_s(op['cpu_seconds'])} s | "
            f"{_s(base['peak_rss_mib'], 0)} MiB / {_s(base['cpu_seconds'])} s | "
            f"{ratio['peak_rss_mib']}x / {ratio['cpu_seconds']}x | - | - |"
        )
    steady = scale.get("steady_state")
    if steady:
        rows.append(
            f"| steady state, {steady['workload']} all Running for {_s(steady['seconds'], 0)} s: operator API "
            f"requests/s | {_s(steady['requests_per_second'], 3)} ({steady['reads']:.0f} reads, "
            f"{steady['writes']:.0f} writes) | - | - | < 1 /s | "
            f"{_bound_verdict(steady['requests_per_second'], 1, '/s')} |"
        )
        rows.append(
            f"| steady state: operator CPU | {_s(steady['cpu_seconds'])} s ({100 * steady['cpu_fraction']:.1f}% of "
            f"a core) | - | - | - | - |"
        )
    memory = scale.get("cache_memory")
    if memory and "rss_mib_after" in memory:
        rows.append(
            f"| operator RSS with {memory['pods_cached']:.0f} pods in its cache | {_s(memory['rss_mib_after'], 0)} MiB "
            f"(before the extra pods: {_s(memory['rss_mib_before'], 0)} MiB) | - | - | <= 250 MB | "
            f"{_bound_verdict(memory['rss_mib_after'] * 1.048576, 250, 'MB')} |"
        )
    rec = scale.get("recovery")
    if rec:
        r, d = rec["recovery"], rec["decision_latency"]
        rows.append(
            f"| recovery: {rec['failed_pods']} pods ({100 * rec['fraction_failed']:.0f}%) failed at once, "
            f"{rec['affected_groups']} groups -> new attempt Running, p50 / p95 | {_s(r['p50'])} / "
            f"{_s(r['p95'])} s | JobSet design: 'several minutes' at 1,000 nodes | - | - | "
            f"{rec['recovered_groups']}/{rec['affected_groups']} recovered |"
        )
        rows.append(
            f"| recovery: failure visible -> restart decision, p50 / p95 / max | {_s(d['p50'], 2)} / "
            f"{_s(d['p95'], 2)} / {_s(d['max'], 2)} s | - | - | p99 <= 1 s | "
            f"{_bound_verdict(d['max'], 1.0, 's')} (max) |"
        )
    return rows


def _iqr(r: dict) -> str:
    if "overhead_iqr" not in r:
        return ""
    low, high = r["overhead_iqr"]
    return f" (IQR {100 * low:+.1f}% .. {100 * high:+.1f}%, {r['pairs']} pairs)"


def trainer_rows(trainer: dict) -> list[str]:
    rows = []
    aim = trainer.get("overhead_aim", 0.03)
    for r in trainer.get("overhead", []):
        over = r["harness_overhead"]
        verdict = "met" if over <= aim else f"missed by {100 * (over - aim):.1f} points"
        rows.append(
            f"| trainer {r['workload']} ({r['preset']}, batch {r['batch_per_rank']}) world 1 samples/s | "
            f"{_s(r['samples_per_second'])} | {_s(r['baseline_samples_per_second'])} (hand-written loop) | "
            f"overhead {100 * over:+.1f}%{_iqr(r)} | <= 3% | {verdict} |"
        )
    for r in trainer.get("scaling", []):
        rows.append(
            f"| trainer {trainer.get('scaling_workload')} gloo world 2, accumulation {r['grad_accum_steps']}, "
            f"samples/s | {_s(r['world2_samples_per_second'])} | {_s(r['world1_samples_per_second'])} "
            f"(world 1) | efficiency {r['efficiency']:.2f} | - | - |"
        )
    return rows


def report_rows(report: dict) -> list[str]:
    rows = []
    for r in report.get("results", []):
        low, high = r["ratio_iqr"]
        rows.append(
            f"| report() per step, loop body {r['body']} ({_s(r['step_us_without'])} us a step) | "
            f"{_s(r['step_us_with'])} us | {_s(r['step_us_without'])} us (no report) | {r['ratio_median']:.3f}x "
            f"(IQR {low:.2f} .. {high:.2f}, {r['pairs']} pairs) | - | - |"
        )
    call = report.get("call_ns_min_of_5") or {}
    if call:
        rows.append(
            f"| report() alone: step only / float loss / tensor loss | {call['step_only'] / 1000:.2f} / "
            f"{call['float_loss_and_samples'] / 1000:.2f} / {call['tensor_loss_and_samples'] / 1000:.2f} us | - | - | "
            f"- | - |"
        )
    return rows


def local_rows(local: dict) -> list[str]:
    """Refuses a breakdown whose parts do not add up to its total (local_recovery.check_parts): a row that is
    dropped on the way hides where the time went."""
    b = local["breakdown_seconds"]
    check_parts(b)
    parts = ", ".join(f"{k} {v:.1f}" for k, v in b.items() if k != TOTAL)
    restarts = f", {local['restarts']} restarts" if local.get("restarts") is not None else ""
    old = " (earlier design, not re-run: see the note below)" if local.get("method") == "old" else ""
    return [
        f"| local recovery: kill -9 -> steps advancing{old} | {_s(b.get(TOTAL))} s ({parts}{restarts}) "
        f"| - | - | - | - |"
    ]


def gang_rows(gang: dict) -> list[str]:
    on, off, setup = gang["gang_on"], gang["gang_off"], gang["setup"]
    what = (
        f"{setup['jobs']} x {setup['pods_per_job']}x{setup['gpus_per_pod']}-GPU jobs, room for {setup['room_for_jobs']}"
    )

    def until(mode: dict) -> str:
        if mode["all_ran"]:
            return f"{_s(mode['seconds_until_all_ran'])} s"
        return f"not all: {mode['jobs_ran']}/{mode['jobs']} ran in {_s(mode['seconds_observed'])} s"

    rows = [
        f"| gang: GPU-seconds held by groups that could not run ({what}) | {_s(on['idle_gpu_seconds'])} "
        f"| {_s(off['idle_gpu_seconds'])} (gang off) | - | 0 | "
        f"{'met' if on['idle_gpu_seconds'] == 0 else 'missed'} |",
        f"| gang: time until every job has run | {until(on)} | {until(off)} (gang off) | "
        f"{_s(gang['time_ratio_on_vs_off'], 3) if gang.get('time_ratio_on_vs_off') else '-'} | - | - |",
    ]
    before = gang.get("gang_off_no_timeout")
    if before is not None:
        timeout = off.get("placement_timeout_seconds")
        after_avg = off["idle_gpu_seconds"] / off["seconds_observed"]
        before_avg = before["idle_gpu_seconds"] / before["seconds_observed"]
        rows += [
            f"| pod by pod: GPUs held by partly placed groups, on average over the run, placement timeout {timeout} s"
            f" vs none ({what}) | {after_avg:.1f} ({_s(off['idle_gpu_seconds'])} GPU-s in "
            f"{_s(off['seconds_observed'])} s) | {before_avg:.1f} ({_s(before['idle_gpu_seconds'])} GPU-s in "
            f"{_s(before['seconds_observed'])} s; no timeout: the behaviour before it) | "
            f"{after_avg / before_avg:.3f} | - | - |",
            f"| pod by pod: time until every job has run, placement timeout vs none | {until(off)} | "
            f"{until(before)} | - | all run | {'met' if off['all_ran'] else 'missed'} |",
        ]
    elastic = gang.get("elastic")
    if elastic and "error" not in elastic:
        rows.append(
            f"| elastic: node lost (tainted out-of-service) -> Running at the smaller size, p50 / p95 "
            f"({elastic['trials']} trials) | {_s(elastic['shrink_p50'])} / "
            f"{_s(elastic['shrink_p95'])} s | - | - | - | - |"
        )
        rows.append(
            f"| elastic: node back -> Running at the bigger size, p50 / p95 | {_s(elastic['grow_p50'])} / "
            f"{_s(elastic['grow_p95'])} s | - | - | - | - |"
        )
    return rows


def deletion_rows(after: dict, before: dict | None) -> list[str]:
    """Namespace deletion with N running jobs: this operator vs the bare pods' floor (same run), the previous
    operator (in the same run, else an earlier one, when measured) and Kubeflow's 13.8 s (issue 27's figure: 100
    running 2-pod jobs on a 60-node cluster; not measured here)."""
    setup, ns, floor, jobs = (
        after["setup"],
        after["operator_namespace"],
        after["baseline_namespace"],
        after["operator_delete_all_jobs"],
    )

    def took(case: dict) -> str:
        return f"{_s(case['seconds'])} s" if case["finished"] else "not gone"

    was = ""
    if after.get("before_namespace") is not None:  # the earlier tree, measured in the same run
        old = after["before_namespace"]
        was = f"; {old['party']} in the same run: {took(old)}, {_s(after.get('before_ratio_vs_baseline'), 2)}x"
    elif before is not None:
        old = before["operator_namespace"]
        was = f"; before: {took(old)}, {old['restarts_counted']:g} restarts counted"
    aim = 13.8
    return [
        f"| delete a namespace with {setup['jobs']} running {setup['pods_per_job']}-pod jobs (restarts counted: "
        f"{ns['restarts_counted']:g}{was}) | {took(ns)} | {took(floor)} (bare pods, no finalizer) | "
        f"{_s(after['namespace_ratio_vs_baseline'], 2)} | <= {aim:g} s (Kubeflow's) | "
        f"{_bound_verdict(ns['seconds'] if ns['finished'] else None, aim, 's')} |",
        f"| `kubectl delete ddpj --all` with {setup['jobs']} jobs: every pod gone | {took(jobs)} | - | - | "
        f"<= {aim:g} s | {_bound_verdict(jobs['seconds'] if jobs['finished'] else None, aim, 's')} |",
    ]


def progress_rows(pw: dict) -> list[str]:
    """Status writes of N Running jobs that report progress, this tree vs the earlier one, same run."""
    after, before = pw["after"], pw["before"]
    stale, was = after["step_staleness_seconds"], before["step_staleness_seconds"]
    return [
        f"| operator writes/s, {pw['jobs']} Running jobs reporting progress (scraped every {pw['scrape_seconds']:g} "
        f"s; after {pw['settle_seconds']:g} s of running) | {_s(after['writes_per_second'])} | "
        f"{_s(before['writes_per_second'])} ({before.get('commit', 'before')}) | "
        f"{_s(pw.get('writes_ratio_after_vs_before'), 2)} | <= 20/s (the default budget) | "
        f"{_bound_verdict(after['writes_per_second'], 20.0, '/s')} |",
        f"| STEP column staleness, p50 / max | {_s(stale['p50'])} / {_s(stale['max'])} s | "
        f"{_s(was['p50'])} / {_s(was['max'])} s | - | max <= 70 s (60 s back-off + a scrape) | "
        f"{_bound_verdict(stale['max'], 70.0, 's')} |",
    ]


def oscillation_rows(osc: dict) -> list[str]:
    """Capacity that comes and goes: this tree vs the operator before the settling rules, same run."""
    setup, before, after = osc["setup"], osc["baseline"], osc["this_tree"]
    what = f"{setup['seconds']:.0f} s, a filler every {setup['toggle_seconds']:.0f} s, elastic {setup['elastic']}"
    bound = osc["restart_bound"]
    return [
        f"| elastic under oscillating capacity: group restarts ({what}) | {after['restarts']} | "
        f"{before['restarts']} (before the settling rules, {setup['baseline_commit']}) | "
        f"{_s(osc['restarts_ratio'], 3) if osc.get('restarts_ratio') is not None else '-'} | <= {bound} | "
        f"{'met' if after['restarts'] <= bound else 'missed'} |",
        f"| elastic under oscillating capacity: fraction of wall time Running | {after['running_fraction']:.0%} | "
        f"{before['running_fraction']:.0%} | - | - | - |",
    ]


def estimate_rows(est: dict) -> list[str]:
    """One elastic pass's capacity estimate: this tree vs the tree before the estimate kept any cache, same run."""
    setup, before, after = est["setup"], est["baseline"], est["this tree"]
    shape = f"capacity estimate, one elastic pass, {setup['nodes']:,} nodes / {setup['bound_pods']:,} bound pods"
    rows = [
        f"| {shape}, nothing changed | {_s(after['median_ms'], 2)} ms | {_s(before['median_ms'], 2)} ms "
        f"({setup['baseline']}) | {_s(est.get('ratio'), 3)} | - | - |"
    ]
    if "after_one_pod_event_median_ms" in before:
        rows.append(
            f"| same, right after one pod event | {_s(after['after_one_pod_event_median_ms'], 2)} ms | "
            f"{_s(before['after_one_pod_event_median_ms'], 2)} ms | {_s(est.get('ratio_after_one_pod_event'), 3)} | "
            "- | - |"
        )
    return rows


def kueue_rows(queue: dict) -> list[str]:
    """A queue under Kueue: DDPJobs vs Kueue's own batch/v1 Job integration, same cluster, same run."""
    setup, ours, base = queue["setup"], queue["operator_ddpjob"], queue["baseline_batch_job"]
    shape = (
        f"{setup['jobs']} jobs of {setup['pods_per_job']} x {setup['gpus_per_pod']} GPUs on a Kueue quota for "
        f"{setup['quota_jobs']}, {setup['run_seconds']:g} s each"
    )
    aim = 1.2
    return [
        f"| {shape}: quota freed -> next job Running, p50 | {_s(ours['handoff_p50_seconds'], 2)} s | "
        f"{_s(base['handoff_p50_seconds'], 2)} s (Kueue's batch/v1 Job) | {_s(queue['handoff_p50_ratio'], 2)} | "
        f"<= {aim:g}x | {_ratio_verdict(queue['handoff_p50_ratio'], aim)} |",
        f"| same, p95 | {_s(ours['handoff_p95_seconds'], 2)} s | {_s(base['handoff_p95_seconds'], 2)} s | "
        f"{_s(queue['handoff_p95_ratio'], 2)} | <= {aim:g}x | {_ratio_verdict(queue['handoff_p95_ratio'], aim)} |",
        f"| same, the whole queue's makespan | {_s(ours['makespan_seconds'])} s | {_s(base['makespan_seconds'])} s | "
        f"{_s(queue['makespan_ratio'], 2)} | <= {aim:g}x | {_ratio_verdict(queue['makespan_ratio'], aim)} |",
    ]


BEGIN = "<!-- SUMMARY:BEGIN (generated by bench/summary.py from bench/results; do not edit) -->"
END = "<!-- SUMMARY:END -->"


def render(results: Path) -> str:
    scale, trainer, local, report, gang = (
        _load(results / "operator_scale.json"),
        load_trainer(results),
        _load(results / "local_recovery.json"),
        _load(results / "report_overhead.json"),
        _load(results / "gang_contention.json"),
    )
    deletion, deletion_before = (
        _load(results / "namespace_deletion.json"),
        _load(results / "namespace_deletion_before.json"),
    )
    queue = _load(results / "kueue_queue.json")
    progress = _load(results / "progress_writes.json")
    oscillation = _load(results / "capacity_oscillation.json")
    estimate = _load(results / "capacity_estimate.json")
    machine = (scale or trainer or local or {}).get("machine", {})
    lines = [
        f"Measured on: {machine.get('cpus')} CPUs ({machine.get('cpu_model')}), {machine.get('memory_gib')} GiB, "
        f"GPU: {machine.get('gpu')}. {machine.get('note', '')}".rstrip(),
        "",
        "| figure | measured | baseline | ratio | aim | verdict |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for rows in (
        scale_rows(scale) if scale and scale.get("workloads") else [],
        trainer_rows(trainer) if trainer else [],
        report_rows(report) if report else [],
        local_rows(local) if local else [],
        gang_rows(gang) if gang else [],
        oscillation_rows(oscillation) if oscillation else [],
        estimate_rows(estimate) if estimate else [],
        deletion_rows(deletion, deletion_before) if deletion else [],
        kueue_rows(queue) if queue else [],
        progress_rows(progress) if progress and progress.get("after", {}).get("step_staleness_seconds") else [],
    ):
        lines += rows
    return "\n".join(lines) + "\n"


def with_table(page: str, table: str) -> str:
    """`page` with the text between its markers replaced by `table`."""
    head, begin, rest = page.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"the page has no {BEGIN!r} ... {END!r} block")
    return f"{head}{BEGIN}\n{table}{END}{tail}"


def table_in(page: str) -> str:
    return page.partition(BEGIN)[2].partition(END)[0].removeprefix("\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", default=str(Path(__file__).resolve().parent / "results"))
    p.add_argument("--docs", help="a page to write the table into, between its SUMMARY markers")
    args = p.parse_args()
    table = render(Path(args.results))
    print(table, end="")
    if args.docs:
        page = Path(args.docs)
        page.write_text(with_table(page.read_text(), table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
