"""The one-command GPU benchmark also runs on CPU at tiny sizes and writes its JSON."""

import json
import subprocess
import sys

from launch import ROOT, trainer_env


def test_bench_runs_on_cpu_and_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    result = subprocess.run([sys.executable, "-m", "ddp_trainer.bench_gpu", "--out", str(out), "--steps", "4",
                             "--warmup-steps", "2", "--repeats", "1"], env=trainer_env(), capture_output=True,
                            text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["machine"]["device"] == "cpu" and report["machine"]["backend"] == "gloo"
    assert report["peak_tflops"] == "by device name"  # no --peak-tflops: looked up on a GPU
    by_name = {r["workload"]: r for r in report["results"]}
    assert set(by_name) == {"digits", "cnn", "gpt"}
    for r in by_name.values():
        assert r["samples_per_second"] > 0 and r["baseline_samples_per_second"] > 0
        assert r["harness_overhead"] == 1 - r["samples_per_second"] / r["baseline_samples_per_second"]
        assert r["flops_per_sample"] > 0 and r["world_size"] == 1
    assert by_name["gpt"]["tokens_per_second"] == by_name["gpt"]["samples_per_second"] * 64
    assert "mfu" not in by_name["gpt"]  # only meaningful against a GPU's peak
    assert [line.split()[0] for line in result.stdout.splitlines()] == ["digits", "cnn", "gpt"]
