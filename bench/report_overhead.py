"""What ddp_trainer.report's report() costs a training loop: the same CPU loop with and without one report() call
per step, as paired alternations (each pair runs both back to back, the order alternating, so both see the same
load on a shared VM). The figure is the median over pairs of time with / time without, with its IQR, and the
median extra time per call; times are the training thread's CPU time, which a busy neighbour disturbs less than
the wall clock. report() runs as a user's script calls it: the process-wide reporter, its endpoint listening, a
loss tensor, step and samples. One call is also timed on its own (fastest of 5, timeit).

    python bench/report_overhead.py --out results/report_overhead.json [--pairs 41 --run-seconds 0.05]"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import time
import timeit
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ddp_trainer import report
from machine import describe_machine

Body = Callable[[], torch.Tensor]


def tensor_op_body() -> Body:
    """The cheapest step there is: one in-place op on a scalar (about a microsecond), the worst case."""
    x = torch.zeros(())
    return lambda: x.add_(1.0)


def matmul_body(n: int = 128) -> Body:
    a, b = torch.randn(n, n), torch.randn(n, n)
    return lambda: (a @ b).sum()


def mlp_step_body(batch: int = 64) -> Body:
    """examples/user-loop's model and optimizer, one rank without DDP: forward, backward, SGD step."""
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.randn(batch, 32), torch.randint(0, 4, (batch,))

    def step() -> torch.Tensor:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss

    return step


BODIES: dict[str, Callable[[], Body]] = {
    "tensor_op": tensor_op_body,
    "matmul_128": matmul_body,
    "user_loop_step": mlp_step_body,
}


def run_without(body: Body, steps: int) -> float:
    started = time.thread_time()
    for _ in range(steps):
        body()
    return time.thread_time() - started


def run_with(body: Body, steps: int, offset: int) -> float:
    started = time.thread_time()
    for i in range(offset, offset + steps):
        loss = body()
        report.report(step=i + 1, loss=loss, samples=(i + 1) * 64)
    return time.thread_time() - started


def measure(name: str, pairs: int, run_seconds: float) -> dict:
    body = BODIES[name]()
    run_with(body, 200, 0)  # warm-up: allocator, autograd, caches
    # Steps per run from a timed warm-up, so every body's run lasts about run_seconds.
    steps = max(100, int(run_seconds * 200 / run_without(body, 200)))
    without, with_report = [], []
    for i in range(pairs):
        offset = (i + 1) * steps  # steps keep growing, as in training
        if i % 2:
            with_report.append(run_with(body, steps, offset))
            without.append(run_without(body, steps))
        else:
            without.append(run_without(body, steps))
            with_report.append(run_with(body, steps, offset))
    ratios = sorted(w / b for w, b in zip(with_report, without, strict=True))
    extra_ns = sorted(1e9 * (w - b) / steps for w, b in zip(with_report, without, strict=True))
    q = statistics.quantiles(ratios, n=4)
    return {
        "body": name,
        "steps_per_run": steps,
        "pairs": pairs,
        "step_us_without": 1e6 * statistics.median(without) / steps,
        "step_us_with": 1e6 * statistics.median(with_report) / steps,
        "ratio_median": statistics.median(ratios),
        "ratio_iqr": [q[0], q[2]],
        "extra_ns_per_call_median": statistics.median(extra_ns),
        "seconds_without": without,
        "seconds_with": with_report,
    }


def call_cost_ns(number: int = 100_000, repeat: int = 5) -> dict[str, float]:
    """One call on its own, the fastest of `repeat` timings (the least disturbed by other load)."""
    loss = torch.zeros((), requires_grad=True) * 2
    calls = {
        "step_only": lambda: report.report(step=5),
        "float_loss_and_samples": lambda: report.report(step=5, loss=0.5, samples=320),
        "tensor_loss_and_samples": lambda: report.report(step=5, loss=loss, samples=320),
        "tensor_detach_alone": loss.detach,
    }
    return {name: 1e9 * min(timeit.repeat(call, number=number, repeat=repeat)) / number for name, call in calls.items()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--pairs", type=int, default=41)
    p.add_argument("--run-seconds", type=float, default=0.05, help="length of one arm of a pair")
    p.add_argument("--bodies", default=",".join(BODIES))
    a = p.parse_args()
    torch.set_num_threads(1)  # one core for both arms; the VM has two, shared
    os.environ.update({"POD_IP": "127.0.0.1", "LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "1"})
    os.environ["DDP_TRAINER_METRICS_PORT"] = str(free_port())
    if not report.serve():
        raise SystemExit("report_overhead: the progress endpoint did not start")
    results = [measure(name, a.pairs, a.run_seconds) for name in a.bodies.split(",")]
    calls = call_cost_ns()
    with open(a.out, "w") as f:
        json.dump(
            {
                "benchmark": "report_overhead",
                "machine": describe_machine(),
                "method": "paired alternation (order alternating), median and IQR of the per-pair ratio of the "
                "training thread's CPU time (time.thread_time) with / without one report() a step",
                "call": "report(step=i, loss=<loss tensor>, samples=i * 64), endpoint listening, not scraped",
                "threads": 1,
                "results": results,
                "call_ns_min_of_5": calls,
            },
            f,
            indent=1,
        )
    for r in results:
        print(
            f"{r['body']:>15}: step {r['step_us_without']:8.2f} us, with report() x{r['ratio_median']:.4f} "
            f"(IQR {r['ratio_iqr'][0]:.4f} .. {r['ratio_iqr'][1]:.4f}), "
            f"+{r['extra_ns_per_call_median']:.0f} ns a call, over {r['pairs']} pairs",
            flush=True,
        )
    print("one call alone (ns, fastest of 5): " + ", ".join(f"{k} {v:.0f}" for k, v in calls.items()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
