"""The log lines are a contract with the e2e tests and the demo: check their exact shape."""

from ddp_trainer.progress_log import Identity, done_line, progress_line, resumed_line
from launch import DONE, PROGRESS, RESUMED


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
    assert RESUMED.search(line)
