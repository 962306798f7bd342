"""kill -9 the operator at random moments while 50 jobs are created, restarted and finished; restart it each
time. Nothing is lost, nothing runs twice, every job ends as its policy says, and no status field goes back."""

from __future__ import annotations

import pytest

from chaos_run import run_chaos
from operator_chaos import OperatorUnderChaos
from workload import build_workload

pytestmark = pytest.mark.slow

JOBS = 50
FAULTS = 50
MIN_KILLS = 6  # jobs that survived their faults succeed only after this many kills


def test_operator_kills_keep_every_invariant(api, namespace, operator_process, seed, figures):
    scripts = build_workload(seed, jobs=JOBS, faults=FAULTS, prefix="k")
    chaos = OperatorUnderChaos(operator_process, seed, alive_seconds=(2.0, 8.0), dead_seconds=(0.1, 1.5),
                               min_kills=MIN_KILLS)
    recorder, driver = run_chaos(api, namespace, chaos, scripts, seed, figures, timeout=300, create_over_seconds=20)

    assert recorder.violations == [], "\n".join(recorder.violations[:30])
    assert chaos.kills >= MIN_KILLS
    assert driver.total_faults == sum(s.outcome().faults_used for s in scripts)
