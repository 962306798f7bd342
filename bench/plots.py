"""PNG plots of whatever results exist in bench/results (a missing JSON skips its plots).

python bench/plots.py [--results bench/results]"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from trainer_summary import load_trainer  # noqa: E402

COLORS = {"operator": "tab:blue", "baseline": "tab:gray"}


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def _cdf(ax, values: list[float], label: str, color: str) -> None:
    if not values:
        return
    ordered = sorted(values)
    ax.step(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], where="post", label=label, color=color)


def plot_scale(scale: dict, out: Path) -> None:
    workloads = scale["workloads"]
    fig, axes = plt.subplots(1, len(workloads), figsize=(6 * len(workloads), 4.2), squeeze=False)
    for ax, w in zip(axes[0], workloads, strict=True):
        for party in ("baseline", "operator"):
            r = w[party]
            _cdf(
                ax,
                r["latencies_seconds"],
                f"{party} (p95 {r['apply_to_all_running_seconds']['p95']:.1f}s, total {r['total_seconds']:.0f}s)",
                COLORS[party],
            )
        ax.set_title(f"{w['name']}: apply -> all pods Running (ratio total {w['ratio']['total']}x)")
        ax.set_xlabel("seconds after the DDPJob was applied")
        ax.set_ylabel("fraction of jobs")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    fig.suptitle(f"Operator vs bare client, {scale['nodes']} kwok nodes, {scale['machine']['cpus']}-core VM")
    fig.tight_layout()
    fig.savefig(out / "operator_scale_latency.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.2))
    labels, x = [], 0
    for w in workloads:
        for party in ("baseline", "operator"):
            per_job = w[party]["requests_per_job"]
            ax.bar(x, per_job["writes"], color=COLORS[party], label=f"{party} writes" if x < 2 else None)
            ax.bar(
                x,
                per_job["reads"],
                bottom=per_job["writes"],
                color=COLORS[party],
                alpha=0.4,
                hatch="//",
                label=f"{party} reads" if x < 2 else None,
            )
            ax.text(
                x,
                per_job["total"],
                f"{per_job['writes']:.1f}w\n{per_job['reads']:.1f}r",
                ha="center",
                va="bottom",
                fontsize=8,
            )
            labels.append(f"{w['name']}\n{party}")
            x += 1
        aim = w["aims"]["writes_per_job_aim"]
        ax.hlines(
            aim, x - 2.4, x - 0.6, colors="tab:red", linestyles="--", label="aim: pods + 3 writes" if x == 2 else ""
        )
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel("API requests per job (API server's APF counters)")
    ax.set_title("API requests per job, apply -> all Running")
    ax.legend(fontsize=8)
    ax.margins(y=0.2)
    fig.tight_layout()
    fig.savefig(out / "operator_requests_per_job.png", dpi=110)
    plt.close(fig)

    rec = scale.get("recovery")
    if rec:
        fig, ax = plt.subplots(figsize=(7, 4.2))
        _cdf(
            ax,
            rec["decision_latency_seconds"],
            f"failure -> restart decision (p50 {rec['decision_latency']['p50']:.1f}s)",
            "tab:orange",
        )
        _cdf(
            ax,
            rec["recovery_seconds"],
            f"failure -> new attempt all Running (p50 {rec['recovery']['p50']:.1f}s)",
            "tab:blue",
        )
        ax.set_title(
            f"Recovery at scale: {rec['failed_pods']} pods failed at once, "
            f"{rec['affected_groups']} groups ({rec['workload']})"
        )
        ax.set_xlabel("seconds after the failure was acknowledged by the API")
        ax.set_ylabel("fraction of affected groups")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "recovery_at_scale.png", dpi=110)
        plt.close(fig)


def plot_trainer(trainer: dict, out: Path) -> None:
    overhead, scaling = trainer.get("overhead") or [], trainer.get("scaling") or []
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    ax = axes[0]
    names = [r["workload"] for r in overhead]
    xs = range(len(names))
    ax.bar(
        [x - 0.2 for x in xs],
        [r["baseline_samples_per_second"] for r in overhead],
        0.4,
        color="tab:gray",
        label="hand-written loop",
    )
    ax.bar(
        [x + 0.2 for x in xs],
        [r["samples_per_second"] for r in overhead],
        0.4,
        color="tab:blue",
        label="ddp_trainer loop",
    )
    for x, r in zip(xs, overhead, strict=True):
        ax.text(
            x + 0.2,
            r["samples_per_second"],
            f"{100 * r['harness_overhead']:+.1f}%",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_xticks(list(xs), names)
    ax.set_yscale("log")
    ax.set_ylabel("samples/s (world 1, CPU)")
    ax.set_title("Harness overhead vs a minimal loop (aim <= 3%)")
    ax.legend(fontsize=8)
    ax = axes[1]
    ks = [r["grad_accum_steps"] for r in scaling]
    ax.plot(ks, [r["efficiency"] for r in scaling], "o-", color="tab:blue", label="world 2 / (2 x world 1)")
    for k, r in zip(ks, scaling, strict=True):
        ax.annotate(
            f"{r['efficiency']:.2f}",
            (k, r["efficiency"]),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize=8,
        )
    ax.axhline(1.0, color="tab:gray", linestyle="--", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_ylim(0, max([1.1] + [1.1 * r["efficiency"] for r in scaling]))
    ax.set_xlabel("gradient accumulation steps (same micro-batch per rank)")
    ax.set_ylabel("scaling efficiency")
    ax.set_title("gloo world 2 vs world 1 at 1, 2, 4 accumulation steps")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "trainer.png", dpi=110)
    plt.close(fig)


def plot_before_after(before: dict, after: dict, out: Path) -> None:
    """The watch-cache operator against the design that read from the API server every pass (its run is kept
    in operator_scale_before.json): API requests per job and the time ratio to the bare client, per workload."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    runs = [("before", w) for w in before["workloads"]] + [("after", w) for w in after["workloads"]]
    for x, (when, w) in enumerate(runs):
        per_job = w["operator"]["requests_per_job"]
        color = "tab:gray" if when == "before" else COLORS["operator"]
        left.bar(x, per_job["writes"], color=color)
        left.bar(x, per_job["reads"], bottom=per_job["writes"], color=color, alpha=0.4, hatch="//")
        left.text(
            x,
            per_job["total"],
            f"{per_job['writes']:.1f}w\n{per_job['reads']:.1f}r",
            ha="center",
            va="bottom",
            fontsize=8,
        )
        left.hlines(w["pods_per_job"] + 3, x - 0.4, x + 0.4, colors="tab:red", linestyles="--")
        right.bar(x - 0.2, w["ratio"]["total"], width=0.4, color=color)
        right.bar(x + 0.2, w["ratio"]["p95"], width=0.4, color=color, alpha=0.5, hatch="..")
    labels = [f"{w['name']}\n{when}" for when, w in runs]
    left.set_xticks(range(len(runs)), labels, fontsize=8)
    left.set_ylabel("operator API requests per job (writes, reads hatched)")
    left.set_title("Requests per job (red: aim pods + 3)")
    left.margins(y=0.2)
    right.set_xticks(range(len(runs)), labels, fontsize=8)
    right.axhline(1.1, color="tab:red", linestyle="--", label="aim 1.1x")
    right.set_ylabel("operator / bare client")
    right.set_title("apply -> all Running: total (solid) and p95 (dotted)")
    right.legend(fontsize=8)
    fig.suptitle("Before (reads from the API server each pass) and after (watch cache, expectations)")
    fig.tight_layout()
    fig.savefig(out / "operator_before_after.png", dpi=110)
    plt.close(fig)


def plot_gang(gang: dict, out: Path) -> None:
    """GPUs held by partial groups (that cannot run) and GPUs training, over time, gang on vs off."""
    fig, (held, training) = plt.subplots(1, 2, figsize=(12, 4.2), sharex=True)
    modes = (
        ("gang_on", "gang on", "tab:blue"),
        ("gang_off", "pod by pod, placement timeout", "tab:green"),
        ("gang_off_no_timeout", "pod by pod, no timeout (before)", "tab:gray"),
    )
    for key, label, color in modes:
        if key not in gang:
            continue
        timeline = gang[key]["timeline"]
        seconds = [t for t, _, _ in timeline]
        held.plot(seconds, [h for _, h, _ in timeline], label=label, color=color)
        training.plot(seconds, [r for _, _, r in timeline], label=label, color=color)
    setup = gang["setup"]
    held.set_title("GPUs held by groups that cannot run")
    training.set_title("GPUs training (all of a job's pods Running)")
    for ax in (held, training):
        ax.set_xlabel("seconds since all jobs were submitted")
        ax.set_ylabel("GPUs")
        ax.legend()
    fig.suptitle(
        f"{setup['jobs']} jobs x {setup['pods_per_job']} pods x {setup['gpus_per_pod']} GPUs on "
        f"{setup['nodes']} nodes x {setup['gpus_per_node']} GPUs (room for {setup['room_for_jobs']} jobs)"
    )
    fig.tight_layout()
    fig.savefig(out / "gang_contention.png", dpi=110)
    plt.close(fig)


def plot_oscillation(osc: dict, out: Path) -> None:
    """The elastic job's size over time under the filler tenant, this tree vs before the settling rules."""
    fig, ax = plt.subplots(figsize=(10, 3.8))
    for key, label, color in (
        ("baseline", "before the settling rules", "tab:gray"),
        ("this_tree", "this tree", "tab:blue"),
    ):
        timeline = osc[key]["timeline"]
        ax.step(
            [t for t, _, _ in timeline],
            [n if running else 0 for _, n, running in timeline],
            where="post",
            label=f"{label}: {osc[key]['restarts']} restarts, Running {osc[key]['running_fraction']:.0%}",
            color=color,
        )
    setup = osc["setup"]
    ax.set_xlabel("seconds since the filler began coming and going")
    ax.set_ylabel("pods training (0: restarting)")
    ax.set_title(f"Elastic {setup['elastic']} under a filler tenant every {setup['toggle_seconds']:.0f} s")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "capacity_oscillation.png", dpi=110)
    plt.close(fig)


def plot_recovery_modes(rec: dict, out: Path, name: str = "recovery_modes.png") -> None:
    """Rank-seconds lost and the survivors' stall per fault, one bar per recovery mode (recovery_modes.py)."""
    rows = rec["rows"]
    faults = list(dict.fromkeys(r["fault"] for r in rows))
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    colors = {"Recreate": "tab:gray", "InPlace": "tab:blue", "TorchFT": "tab:green", "TorchFT+InPlace": "tab:olive"}
    fig, (lost, stall) = plt.subplots(1, 2, figsize=(14, 4.6))
    width = 0.8 / max(1, len(modes))
    for i, mode in enumerate(modes):
        by_fault = {r["fault"]: r for r in rows if r["mode"] == mode}
        xs = [f + (i - (len(modes) - 1) / 2) * width for f in range(len(faults))]
        for ax, key in ((lost, "rank_seconds_lost"), (stall, "stall_seconds")):
            ax.bar(xs, [by_fault.get(f, {}).get(key, 0) for f in faults], width, label=mode, color=colors.get(mode))
    names = {
        "kill": "kill -9\none process",
        "delete": "delete\none pod",
        "node": "stop\none node",
        "freeze": "one node\nsilent",
        "lighthouse": "the Lighthouse's\nnode silent",
        "lighthouse-pod": "delete the\nLighthouse's pod",
    }
    for ax, title in ((lost, "rank-seconds lost (lower is better)"), (stall, "survivors' stall, s")):
        ax.set_xticks(range(len(faults)), [names.get(f, f) for f in faults])
        ax.set_title(title)
        ax.legend()
    fig.suptitle(f"Recovery by fault and mode: {rec['job']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", default=str(Path(__file__).resolve().parent / "results"))
    out = Path(p.parse_args().results)
    scale = _load(out / "operator_scale.json")
    if scale and scale.get("workloads"):
        plot_scale(scale, out)
        before = _load(out / "operator_scale_before.json")
        if before and before.get("workloads") and all("operator" in w for w in scale["workloads"]):
            plot_before_after(before, scale, out)
    trainer = load_trainer(out)
    if trainer:
        plot_trainer(trainer, out)
    gang = _load(out / "gang_contention.json")
    if gang:
        plot_gang(gang, out)
    oscillation = _load(out / "capacity_oscillation.json")
    if oscillation:
        plot_oscillation(oscillation, out)
    for nodes in ("", "_real"):  # the local nodes', then the real nodes' (recovery_modes.py --nodes real)
        recovery = _load(out / f"recovery_modes{nodes}.json")
        if recovery and recovery.get("rows"):
            plot_recovery_modes(recovery, out, f"recovery_modes{nodes}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
