"""User code through the same harness: --entrypoint module:function or a script path."""

import textwrap

import pytest

from ddp_trainer.user_entrypoint import EntrypointError, load_entrypoint
from launch import DONE, PROGRESS, RESUMED, run, standalone_cmd

SCRIPT = textwrap.dedent('''
    import torch
    import torch.nn.functional as F
    from ddp_trainer.workloads import IndexableTensors, Workload

    def build_workload(cfg):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(256, 4, generator=g)
        y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1
        return Workload(name="linreg", model=torch.nn.Linear(4, 1), train_set=IndexableTensors(x, y),
                        sample_losses=lambda out, t: F.mse_loss(out.squeeze(1), t, reduction="none"))
''')


def test_script_path_runs_under_the_harness(tmp_path):
    script = tmp_path / "train_linreg.py"
    script.write_text(SCRIPT)
    args = ["--entrypoint", str(script), "--train.steps", "60", "--train.optimizer", "sgd", "--train.lr", "0.05", "--metrics.port", "0",
            "--checkpoint.dir", str(tmp_path / "ck"), "--log.every-steps", "20"]
    first = run(standalone_cmd(1, *args))
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    done = DONE.search(first.stdout)
    assert done and done["metric"] == "final_loss" and float(done["value"]) < 1.0
    losses = [float(m["loss"]) for m in PROGRESS.finditer(first.stdout)]
    assert losses[-1] < losses[0]
    assert (tmp_path / "ck" / "step-000000060.pt").is_file()  # the harness's checkpoints, for user code too
    again = run(standalone_cmd(1, *args[:3], "80", *args[4:]))
    assert RESUMED.search(again.stdout)["step"] == "60"


def test_module_function(tmp_path, monkeypatch):
    (tmp_path / "my_pkg_train.py").write_text("def make(cfg):\n    return ('built', cfg)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_entrypoint("my_pkg_train:make")("c") == ("built", "c")


def test_script_with_named_function(tmp_path):
    (tmp_path / "s.py").write_text("def other(cfg):\n    return 42\n")
    assert load_entrypoint(f"{tmp_path / 's.py'}:other")(None) == 42


@pytest.mark.parametrize("spec, message", [
    ("no_such_module_xyz:f", "--entrypoint 'no_such_module_xyz:f': cannot import no_such_module_xyz"),
    ("json", "--entrypoint 'json': expected module:function or a path ending in .py"),
    ("json:no_such_function", "--entrypoint 'json:no_such_function': json has no function 'no_such_function'"),
    ("/nonexistent/train.py", "--entrypoint '/nonexistent/train.py': script /nonexistent/train.py does not exist"),
])
def test_bad_entrypoints_say_what_is_wrong(spec, message):
    with pytest.raises(EntrypointError) as e:
        load_entrypoint(spec)
    assert message in str(e.value)


def test_script_without_build_workload(tmp_path):
    (tmp_path / "empty.py").write_text("x = 1\n")
    with pytest.raises(EntrypointError, match="has no function 'build_workload'"):
        load_entrypoint(str(tmp_path / "empty.py"))
