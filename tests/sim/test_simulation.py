"""The planner in a simulated cluster (docs/simulation.md): seeded runs of every mode, Hypothesis' own search
with shrinking, the regressions it found, and proof that it catches a defect put in on purpose."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddpjob_operator.recovery import failure_class
from sim.driver import FAULTS, run, run_seed, shrink, story
from sim.regressions import REGRESSIONS, START
from sim.world import MODES, Config

# make test's share: at least this many steps over the seeds below (make sim runs millions: sim_run.py).
STEPS = 20_000


def test_seeded_runs_keep_every_promise():
    steps, seed = 0, 0
    while steps < STEPS:
        out = run_seed(seed, 400)
        if out.problem is not None:
            pytest.fail(f"seed {seed} (make sim SIM_SEED={seed}):\n{story(shrink(out))}")
        steps += out.steps
        seed += 1


@pytest.mark.parametrize("name, config, events", REGRESSIONS, ids=[r[0][:60] for r in REGRESSIONS])
def test_regressions_hold(name, config, events):
    out = run(config, events)
    assert out.problem is None, f"{name}\n{story(out)}"


def test_the_simulation_finds_a_defect_put_in_on_purpose(monkeypatch):
    """A planner that blames the trainer for everything: the invariants must say so, on the first row's story."""
    monkeypatch.setattr(failure_class, "class_of", lambda failure: failure_class.TRAINER)
    config = Config(mode="Recreate", replicas=2, backoff_limit=3)
    out = run(config, [*START, ("reconcile",), ("delete_pod", 1, 1, False), ("reconcile",), ("reconcile",)])
    assert out.problem is not None and out.problem.startswith("trainer_charged_only_for_its_own"), out.problem


configs = st.builds(
    Config,
    mode=st.sampled_from(MODES),
    replicas=st.integers(2, 4),
    backoff_limit=st.sampled_from([0, 1, 3]),
    platform_limit=st.sampled_from([3, 20]),
    kueue=st.booleans(),
)
index = st.integers(0, 3)
events = st.one_of(
    st.just(("reconcile",)),
    st.tuples(st.just("tick"), st.sampled_from([0.5, 1, 5, 31])),
    st.tuples(st.just("scrape"), st.integers(0, 15)),
    st.tuples(st.just("crash"), index, st.sampled_from([1, 137, 143])),
    st.tuples(st.just("crash_all"), st.sampled_from([1, 137])),
    st.tuples(st.just("delete_pod"), index, st.integers(1, 3), st.booleans()),
    st.tuples(st.sampled_from(["node_lost", "node_reboot"]), index, st.integers(1, 2)),
    st.tuples(st.just("crash_during_next_pass"), st.integers(0, 3)),
    st.sampled_from([("operator_restart",), ("conflict_next_pass",), ("node_monitor",), ("kueue_admit",),
                     ("kueue_evict",), ("succeed",), ("patch_join_timeout", 300)]),
)
assert set(FAULTS) >= {"crash", "crash_all", "delete_pod", "node_lost", "node_reboot"}


@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs, sequence=st.lists(events, min_size=5, max_size=60))
def test_hypothesis_finds_no_broken_promise(config, sequence):
    # Reconciles between the faults, as the operator's wake-ups give them.
    out = run(config, [*START, *[e for ev in sequence for e in (ev, ("reconcile",))]])
    assert out.problem is None, story(out)


def test_the_simulation_finds_a_job_that_leaves_its_pods_behind(monkeypatch):
    """A planner whose terminal step cleans up nothing: the clean-up invariant must say so."""
    from ddpjob_operator import planner

    monkeypatch.setattr(planner, "_finish", lambda obs, spec, status, pods, plan: None)
    out = run_seed(0, 400)
    assert out.problem is not None and out.problem.startswith("nothing_left_running_after_the_end"), out.problem
