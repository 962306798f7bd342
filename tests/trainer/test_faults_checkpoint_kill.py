"""A rank killed (SIGKILL) while it writes a checkpoint: the write never becomes visible, and the restarted group
resumes from the previous valid checkpoint, then finishes at exactly the target step.

To hit the write window every time, a sitecustomize hook (written into the test's own PYTHONPATH) holds the
chosen step's write open after its temp file is written and before the atomic rename, and signals a marker;
the test then kills the writer there."""

import os
import signal
import time

from launch import DONE, PROGRESS, RESUMED, start, standalone_cmd, stop, trainer_env, wait_for_line

STEPS = 100
EVERY = 20
HELD_STEP = 60

HOOK = r'''
import os
import re
import time

_HOLD = os.environ.get("DDP_FAULT_HOLD_STEP")
_MARKER = os.environ.get("DDP_FAULT_MARKER")

if _HOLD and _MARKER:
    _replace = os.replace
    _pattern = re.compile(rf"^\.step-{int(_HOLD):09d}\.pt\.tmp-\d+$")

    def _held_replace(src, dst, *args, **kwargs):
        if _pattern.match(os.path.basename(os.fspath(src))) and not os.path.exists(_MARKER):
            with open(_MARKER + ".tmp", "w") as f:
                f.write(f"{os.getpid()} {os.path.getsize(src)}\n")
            _replace(_MARKER + ".tmp", _MARKER)  # whole: the test reads it as soon as it exists
            time.sleep(120)
        return _replace(src, dst, *args, **kwargs)

    os.replace = _held_replace
'''


def test_rank_killed_mid_checkpoint_write_resumes_from_the_previous_valid_one(tmp_path):
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(HOOK)
    marker, ck, log = tmp_path / "held", tmp_path / "ck", tmp_path / "torchrun.log"
    env = trainer_env(PYTHONPATH=f"{hooks}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                      DDP_FAULT_HOLD_STEP=str(HELD_STEP), DDP_FAULT_MARKER=str(marker))
    proc = start(standalone_cmd(2, "--workload", "digits", "--train.steps", str(STEPS), "--metrics.port", "0",
                                "--checkpoint.dir", str(ck), "--checkpoint.every-steps", str(EVERY),
                                "--log.every-steps", "10", max_restarts=1), env=env, log=log)
    try:
        deadline = time.monotonic() + 300  # a bound for a hang only: under the full suite the group starts slowly
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        writer, size = (int(x) for x in marker.read_text().split())
        assert size > 0, "the held temp file has the checkpoint's bytes"
        names = sorted(p.name for p in ck.iterdir())
        assert f"step-{HELD_STEP:09d}.pt" not in names and any(n.startswith(f".step-{HELD_STEP:09d}.pt.tmp-")
                                                                 for n in names), names
        os.kill(writer, signal.SIGKILL)
        resumed = wait_for_line(log, RESUMED, proc, timeout=300)
        assert proc.wait(timeout=300) == 0, log.read_text()[-4000:]
    finally:
        stop(proc)
    text = log.read_text()
    assert int(resumed["step"]) == HELD_STEP - EVERY, text[-3000:]
    done = DONE.search(text)
    assert done and int(done["step"]) == STEPS, text[-3000:]
    after = [int(m["step"]) for m in PROGRESS.finditer(text) if m["attempt"] == "1"]
    assert after and after[0] == HELD_STEP - EVERY + 10, after
    assert not [p.name for p in ck.iterdir() if ".tmp-" in p.name], "the killed writer's temp file is cleaned up"
