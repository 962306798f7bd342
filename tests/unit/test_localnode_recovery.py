"""The recovery breakdown `make demo` and the e2e tests report, from the trainer's log lines and observed times."""

from __future__ import annotations

from ddp_trainer.progress_log import (
    Identity,
    done_line,
    progress_line,
    resumed_line,
    startup_line,
)

from ddpjob_localnode.recovery import RecoveryClock, parse_time, parse_trainer_log

# worker 0's log as `kubectl logs --timestamps` shows it, each line printed by the trainer's own writer.
W0 = Identity("d", "1", 0)
LOG = "\n".join(
    f"2026-01-01T00:00:{stamp}Z {line}"
    for stamp, line in [
        ("12.000000000", resumed_line(W0, 100, 6400, 4)),
        ("12.500000000", startup_line(W0, 6.0, 0.5, 0.25)),
        ("13.000000000", progress_line(W0, 110, 300, 3, 0.1, 1e-3, 100.0)),
        ("20.000000000", progress_line(W0, 300, 300, 9, 0.01, 1e-4, 100.0)),
        ("20.100000000", done_line(W0, 300, "test_accuracy", 0.975, 10.0)),
    ]
)


def test_parse_trainer_log_reads_resume_ready_steps_and_accuracy():
    log = parse_trainer_log(LOG)
    assert (log.resumed_step, log.steps, log.metric_name, log.accuracy) == (100, [110, 300], "test_accuracy", 0.975)
    assert (log.process_s, log.rendezvous_s, log.checkpoint_load_s) == (6.0, 0.5, 0.25)
    assert log.ready_at == parse_time("2026-01-01T00:00:12.5Z")
    assert log.first_step_at - log.ready_at == 0.5


def test_breakdown_adds_up_to_the_time_from_kill_to_the_first_step():
    t0 = parse_time("2026-01-01T00:00:00Z")
    clock = RecoveryClock()
    clock.kill(t0, step=120, restarts=0)
    status = {"restarts": 1, "attempt": 1, "replicas": 2}
    running = [{"metadata": {"labels": {"ddpjob.dev/restart-attempt": "1"}}, "status": {"phase": "Running"}}] * 2
    clock.observe(status, [], t0 + 2)
    clock.observe(status, running, t0 + 4)
    rows = dict(clock.breakdown(parse_trainer_log(LOG)))
    assert rows["detection"] == 2 and rows["pod recreation"] == 2
    assert rows["torchrun start"] == 12.5 - 4 - 6
    assert rows["process start"] == 6 - 0.5 - 0.25
    parts = sum(v for k, v in rows.items() if k != "recovery total")
    assert abs(parts - rows["recovery total"]) < 1e-6 and rows["recovery total"] == 13


def test_breakdown_says_incomplete_when_the_restart_was_not_seen():
    clock = RecoveryClock()
    clock.kill(0.0, step=1)
    assert clock.breakdown(parse_trainer_log(LOG)) == [("incomplete", -1.0)]
