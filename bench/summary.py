"""The README's benchmark table, from bench/results/*.json: each figure next to its baseline and its aim, and by
how much an aim is missed.

    python bench/summary.py [--results bench/results] > bench/results/summary.md"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from trainer_summary import load_trainer


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def _s(value, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _ratio_verdict(ratio: float | None, aim: float) -> str:
    if ratio is None:
        return "not measured"
    return "met" if ratio <= aim else f"missed by {ratio - aim:.2f}x ({100 * (ratio / aim - 1):.0f}% over)"


def scale_rows(scale: dict) -> list[str]:
    rows = []
    for w in scale["workloads"]:
        op, base, ratio, aims = w["operator"], w["baseline"], w["ratio"], w["aims"]
        lo, lb = op["apply_to_all_running_seconds"], base["apply_to_all_running_seconds"]
        cut = " (cut short)" if op["timed_out"] or base["timed_out"] else ""
        name = w["name"]
        rows.append(
            f"| {name} apply -> all Running, total{cut} | {_s(op['total_seconds'])} s | "
            f"{_s(base['total_seconds'])} s | {ratio['total']}x | <= 1.2x | "
            f"{_ratio_verdict(ratio['total'], 1.2)} |"
        )
        rows.append(
            f"| {name} per job p50 / p95 / max | {_s(lo['p50'])} / {_s(lo['p95'])} / {_s(lo['max'])} s | "
            f"{_s(lb['p50'])} / {_s(lb['p95'])} / {_s(lb['max'])} s | {ratio['p50']} / {ratio['p95']} / "
            f"{ratio['max']}x | <= 1.2x | {_ratio_verdict(ratio['p95'], 1.2)} (p95) |"
        )
        writes, aim = op["requests_per_job"]["writes"], aims["writes_per_job_aim"]
        verdict = "met" if aims["writes_per_job_met"] else f"missed by {writes - aim:.1f} writes/job"
        rows.append(
            f"| {name} API writes per job | {_s(writes)} | {_s(base['requests_per_job']['writes'])} | "
            f"{ratio['writes_per_job']}x | <= {aim} (pods + 3) | {verdict} |"
        )
        rows.append(
            f"| {name} API requests per job (reads + writes) | {_s(op['requests_per_job']['total'])} | "
            f"{_s(base['requests_per_job']['total'])} | {ratio['requests_per_job']}x | - | - |"
        )
        rows.append(
            f"| {name} peak RSS / CPU seconds | {_s(op['peak_rss_mib'], 0)} MiB / {_s(op['cpu_seconds'])} s | "
            f"{_s(base['peak_rss_mib'], 0)} MiB / {_s(base['cpu_seconds'])} s | "
            f"{ratio['peak_rss_mib']}x / {ratio['cpu_seconds']}x | - | - |"
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
            f"| recovery: failure visible -> restart decision, p50 / p95 | {_s(d['p50'], 2)} / "
            f"{_s(d['p95'], 2)} s | - | - | - | - |"
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


def local_rows(local: dict) -> list[str]:
    b = local["breakdown_seconds"]
    parts = ", ".join(f"{k} {v:.1f}" for k, v in b.items() if k != "recovery total")
    return [
        f"| local recovery: kill -9 -> steps advancing | {_s(b.get('recovery total'))} s ({parts}) | - | - | - | - |"
    ]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", default=str(Path(__file__).resolve().parent / "results"))
    results = Path(p.parse_args().results)
    scale, trainer, local = (
        _load(results / "operator_scale.json"),
        load_trainer(results),
        _load(results / "local_recovery.json"),
    )
    machine = (scale or trainer or local or {}).get("machine", {})
    print(
        f"Measured on: {machine.get('cpus')} CPUs ({machine.get('cpu_model')}), {machine.get('memory_gib')} GiB, "
        f"GPU: {machine.get('gpu')}. {machine.get('note', '')}".rstrip()
    )
    print()
    print("| figure | measured | baseline | ratio | aim | verdict |")
    print("| --- | --- | --- | --- | --- | --- |")
    for rows in (
        scale_rows(scale) if scale and scale.get("workloads") else [],
        trainer_rows(trainer) if trainer else [],
        local_rows(local) if local else [],
    ):
        for row in rows:
            print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
