"""Real learning: torchrun with 2 processes trains scikit-learn's digits to >= 90% test accuracy."""

import os

from launch import DONE, PROGRESS, run, standalone_cmd, trainer_env

from ddp_trainer.progress_log import STARTED


def test_two_processes_learn_digits(tmp_path):
    result = run(standalone_cmd(2, "--workload", "digits", "--train.steps", "120", "--train.lr", "0.002",
                                "--metrics.port", "0", "--log.every-steps", "20"))
    assert result.returncode == 0, result.stdout + result.stderr
    done = DONE.search(result.stdout)
    assert done, result.stdout
    assert done["metric"] == "test_accuracy" and done["step"] == "120"
    assert float(done["value"]) >= 0.90, result.stdout
    lines = list(PROGRESS.finditer(result.stdout))
    assert [int(m["step"]) for m in lines] == [20, 40, 60, 80, 100, 120]  # one stream: local rank 0 only
    assert float(lines[-1]["loss"]) < float(lines[0]["loss"])
    assert "started pid=" in result.stdout and "world_size=2 backend=gloo device=cpu" in result.stdout


def test_the_gpu_options_that_run_on_cpu_still_learn(tmp_path):
    """fp16 autocast with its GradScaler, fused AdamW, PowerSGD gradients (exact for the first 10 steps, low-rank
    after) and gradient clipping through the scaler, together on 2 gloo ranks: the loss still falls."""
    result = run(standalone_cmd(2, "--workload", "digits", "--train.steps", "60", "--train.lr", "0.002",
                                "--metrics.port", "0", "--log.every-steps", "20", "--ddp.autocast", "fp16",
                                "--train.fused", "on", "--ddp.comm-hook", "powersgd", "--ddp.powersgd-rank", "2",
                                "--train.grad-clip", "1.0"))
    assert result.returncode == 0, result.stdout + result.stderr
    losses = [float(m["loss"]) for m in PROGRESS.finditer(result.stdout)]
    assert len(losses) == 3 and losses[-1] < losses[0], result.stdout


def test_a_rank_runs_as_many_threads_as_its_cpus_not_the_hosts_cores():
    """torch's default is every host core; a rank gets its cpuset's CPUs (here one, by taskset) over its local
    ranks, unless OMP_NUM_THREADS says otherwise (device_options.intra_op_threads)."""
    cmd = ["taskset", "-c", "0", *standalone_cmd(1, "--workload", "digits", "--train.steps", "10",
                                                  "--metrics.port", "0", "--log.every-steps", "10")]
    unset = {k: v for k, v in trainer_env().items() if k != "OMP_NUM_THREADS"}
    result = run(cmd, env=unset)
    assert result.returncode == 0, result.stdout + result.stderr
    assert STARTED.search(result.stdout)["threads"] == "1", result.stdout
    if len(os.sched_getaffinity(0)) < 2:
        return  # the rest tells OMP_NUM_THREADS=1 from a choice of 2 or more
    result = run(cmd[3:], env={**unset, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert STARTED.search(result.stdout)["threads"] == "1", result.stdout
