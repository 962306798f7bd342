#!/usr/bin/env bash
# The trainer's GPU checks, one script for a lent GPU machine (docs/trainer.md, GPU figures): what CI's CPU machine
# cannot run. Each step has its own time limit, so one that hangs costs only its own figures.
#   1. bench_gpu: throughput, GPT MFU and the harness overhead against a minimal DDP loop (NCCL, bf16), eager and
#      compiled (torch.compile, the CUDA default);
#   2. the harness through torchrun on NCCL, as the image runs it (compile on by default, the micro-batch `auto`):
#      the compile time apart, phase times read from CUDA events, DCP checkpoints, then a resume that keeps the
#      micro-batch the first run probed;
#   3. the step stall of a periodic checkpoint by format (file, dcp, dcp async) on the GPU;
#   4. an in-place restart under `python -m ddp_trainer.torchrun`: the worker forked from the warm fork server gets
#      CUDA at its start and again after a SIGKILL, against the same run with DDP_TRAINER_WARM_WORKERS=0.
# Usage: OUT=dir bash hack/gpu_checks.sh 2>&1 | tee dir/all.log   (python3 with torch, prometheus-client and pyyaml; no cluster needed)
set -u
out=${OUT:-/tmp/gpu-checks}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$root/trainer_image/src:$root/bench" PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
scale=${GPU_CHECKS_SCALE:-1}  # 0: a quick rehearsal on CPU (tiny sizes, few steps)
step() { echo ">> $(date +%T) $*"; }
want() { [[ " ${GPU_CHECKS_STEPS:-1 2 3 4} " == *" $1 "* ]]; }  # GPU_CHECKS_STEPS="2 3": only those

step "the machine"
{
  nvidia-smi -L 2>&1 || true
  "$py" -c 'import torch, platform; c = torch.cuda.is_available(); print("python", platform.python_version(),
"torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version() if c else None,
"device", torch.cuda.get_device_name(0) if c else "cpu")'
} 2>&1

if [ "$scale" = 0 ]; then
  bench_args=(--preset tiny --steps 5 --warmup-steps 2 --repeats 1 --workloads digits,gpt)
  run_args=(--workload gpt --model.preset tiny --train.steps 20 --log.every-steps 5 --checkpoint.every-steps 10)
  resume_steps=30
  stall_args=(--layers 1 --width 128 --steps 4 --every 2 --rounds 1)
  warm_args=(--kill-at 10 -- --workload gpt --model.preset tiny --train.steps 30 --log.every-steps 5
    --checkpoint.every-steps 5)
else
  bench_args=(--preset small)
  run_args=(--workload gpt --model.preset small --train.batch-size-per-rank 64 --train.micro-batch-size auto
    --train.steps 300 --log.every-steps 50 --checkpoint.every-steps 100)
  resume_steps=400
  stall_args=()
  warm_args=(--kill-at 150 -- --workload gpt --model.preset small --train.batch-size-per-rank 16
    --train.steps 300 --log.every-steps 50 --checkpoint.every-steps 100)
fi

if want 1; then
  step "1. bench_gpu ${bench_args[*]}, eager"
  timeout 200 "$py" -m ddp_trainer.bench_gpu --out "$out/trainer_gpu.json" "${bench_args[@]}" 2>&1
  step "1. bench_gpu ${bench_args[*]}, compiled"
  timeout 300 "$py" -m ddp_trainer.bench_gpu --compile --out "$out/trainer_gpu_compiled.json" "${bench_args[@]}" 2>&1
fi

if want 2; then
  step "2. the harness through torchrun: ${run_args[*]}, then a resume to step $resume_steps"
  ckpt=$(mktemp -d)
  port=${GPU_CHECKS_METRICS_PORT:-9400}
  # The phase histograms (data, forward_backward, optimizer) live on the metrics page: keep its latest copy.
  "$py" - "$port" "$out/trainer_metrics.txt" <<'PY' &
import sys, time, urllib.request
port, path = sys.argv[1], sys.argv[2]
for _ in range(600):
    try:
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read()
        open(path, "wb").write(page)
    except OSError:
        pass
    time.sleep(1)
PY
  scraper=$!
  timeout 240 "$py" -m torch.distributed.run --standalone --nproc-per-node 1 -m ddp_trainer "${run_args[@]}" \
    --checkpoint.dir "$ckpt" --checkpoint.format dcp --metrics.port "$port" 2>&1
  kill "$scraper" 2>/dev/null
  timeout 180 "$py" -m torch.distributed.run --standalone --nproc-per-node 1 -m ddp_trainer "${run_args[@]}" \
    --train.steps "$resume_steps" --checkpoint.dir "$ckpt" --checkpoint.format dcp 2>&1
  rm -rf "$ckpt"

fi

if want 3; then
  step "3. checkpoint stall ${stall_args[*]}"
  timeout "${GPU_CHECKS_STALL_SECONDS:-150}" "$py" -m torch.distributed.run --standalone --nproc-per-node 1 \
    "$root/bench/checkpoint_stall.py" --out "$out/checkpoint_stall.json" "${stall_args[@]}" 2>&1
fi
if want 4; then
  step "4. an in-place restart, warm fork server and cold: ${warm_args[*]}"
  timeout "${GPU_CHECKS_WARM_SECONDS:-400}" "$py" "$root/bench/warm_workers_restart.py" \
    --out "$out/warm_workers_restart.json" "${warm_args[@]}" 2>&1
  echo "exit $?"
fi
step "done"
