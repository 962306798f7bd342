"""The chaos suite's summary table (tests/chaos/conftest.py collects a row per test), printed at the end of the
session: by that conftest in a plain run, and under `make test`'s two pytest-xdist workers by the controller, which
gets the rows from the worker that ran them (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterable

KEY = "chaos_summary"  # the rows' key in a worker's `workeroutput`


def write(terminalreporter, rows: Iterable[dict]) -> None:
    rows = list(rows)
    if not rows:
        return
    tr = terminalreporter
    tr.section("chaos summary")
    tr.write_line(f"{'test':<44} {'seed':>10} {'jobs':>5} {'faults':>6} {'op kills':>8} {'violations':>10} "
                  f"{'peak RSS MiB':>12} {'seconds':>8}")
    for row in rows:
        tr.write_line(f"{row['test'][:44]:<44} {row['seed']:>10} {row['jobs']:>5} {row['faults']:>6} "
                      f"{row['operator_kills']:>8} {row['violations']:>10} {row['peak_rss_mib']:>12.1f} "
                      f"{row['seconds']:>8.1f}")
        if row["detail"]:
            tr.write_line(f"    {row['detail']}")
