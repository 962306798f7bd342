"""The log lines are a contract with the e2e tests, the demo and the recovery breakdown: each writer's exact
shape, and that its pattern (which those readers import) reads back what it wrote."""

from ddp_trainer.progress_log import (
    DONE,
    PROGRESS,
    READY,
    RESUMED,
    SIZED,
    STARTED,
    Identity,
    done_line,
    progress_line,
    resumed_line,
    sized_line,
    started_line,
    startup_line,
)


def test_identity_from_operator_env():
    who = Identity.from_environ(3, {"DDPJOB_NAME": "mnist", "DDPJOB_ATTEMPT": "2", "TORCHELASTIC_RESTART_COUNT": "1"})
    assert who.prefix == "[job=mnist attempt=2 rank=3]"


def test_identity_falls_back_to_torchelastic_restart_count():
    assert Identity.from_environ(0, {"TORCHELASTIC_RESTART_COUNT": "4"}).prefix == "[job=local attempt=4 rank=0]"


def test_progress_line():
    line = progress_line(Identity("j", "1", 0), 20, 100, 2, 0.123456, 0.002, 1234.56)
    assert line == "[job=j attempt=1 rank=0] step=20/100 epoch=2 loss=0.1235 lr=2.0e-03 samples/s=1234.6"
    assert PROGRESS.fullmatch(line)


def test_done_line():
    line = done_line(Identity("j", "0", 0), 100, "test_accuracy", 0.95123, 12.34)
    assert line == "[job=j attempt=0 rank=0] done step=100 test_accuracy=0.9512 wall_s=12.3"
    assert DONE.fullmatch(line)


def test_resumed_line():
    line = resumed_line(Identity("j", "1", 2), 40, 2560, 4)
    assert line == "[job=j attempt=1 rank=2] resumed from checkpoint step=40 samples=2560 world_size_was=4"
    assert RESUMED.fullmatch(line)["was"] == "4"


def test_sized_line():
    line = sized_line(Identity("j", "2", 0), 2, 96, 48, 24, 2, 0.00066667)
    assert line == ("[job=j attempt=2 rank=0] sized world_size=2 global_batch=96 rank_batch=48 micro_batch=24 accum=2 "
                    "peak_lr=6.667e-04")
    found = SIZED.fullmatch(line)
    assert (found["world"], found["batch"], found["rank_batch"], found["micro_batch"], found["accum"],
            float(found["lr"])) == ("2", "96", "48", "24", "2", 6.667e-04)
    assert found["auto"] is None
    probed = sized_line(Identity("j", "2", 0), 2, 96, 48, 24, 2, 0.00066667, "probed")
    assert probed.endswith("peak_lr=6.667e-04 micro_batch_auto=probed") and SIZED.fullmatch(probed)["auto"] == "probed"


def test_started_and_ready_lines():
    who = Identity("j", "0", 1)
    started = STARTED.fullmatch(started_line(who, 4, "gloo", "cpu", 2, 0.5))
    assert started and (started["world"], started["backend"], started["threads"], started["rendezvous"]) == (
        "4", "gloo", "2", "0.50")
    ready = READY.fullmatch(startup_line(who, 6.0, 0.5, 0.25))
    assert ready and (ready["process"], ready["rendezvous"], ready["load"]) == ("6.00", "0.50", "0.25")


def test_patterns_find_a_line_behind_a_timestamp():
    """kubectl logs --timestamps puts the time first; the readers search each line."""
    text = "2026-01-01T00:00:01Z " + progress_line(Identity("j", "1", 0), 5, 10, 0, 0.5, 1e-3, 10.0) + "\n"
    assert PROGRESS.search(text)["step"] == "5"
