#!/usr/bin/env bash
# `make bench`: trainer overhead and scaling (CPU), operator scale and recovery at scale (throw-away kwok
# cluster on its own ports), local recovery (the demo's kill), then plots and the summary table.
#   BENCH_WORKLOADS="1000x2 100x16"   scale workloads, JOBSxPODS (the first also measures steady state, recovery at
#                                     scale and cache memory)
#   BENCH_STEADY_SECONDS=300          steady state: every job Running, nobody acting
#   BENCH_CACHE_PODS=10000            labelled pods in the operator's cache for the memory figure
#   BENCH_TRAINER_PAIRS=15            harness/baseline pairs per workload (overhead)
#   BENCH_REPORT_PAIRS=41             with/without report() pairs per loop body (progress API cost)
#   BENCH_TRAINER_STEPS=30 BENCH_TRAINER_REPEATS=5   world 1 vs 2 scaling: steps per repeat, repeats
#   BENCH_NODES=250                   kwok nodes (x 8 GPUs) of the throw-away cluster
#   BENCH_GANG_JOBS=12 BENCH_GANG_NODES=8   gang contention: 4 x 8-GPU jobs submitted at once, kwok nodes x 8 GPUs
#   BENCH_DELETION_JOBS=100           deletion: running 2-pod jobs in the namespace deleted
#   BENCH_KUEUE_JOBS=100 BENCH_KUEUE_QUOTA=10 BENCH_KUEUE_RUN_SECONDS=10   a queue under Kueue vs its batch/v1 Job
#   BENCH_OSCILLATION_SECONDS=300     capacity oscillation: an elastic job under a filler tenant every 20 s, this tree
#                                     vs the operator before the settling rules (a git worktree of e0edcad^)
#   BENCH_TORCHFT_TIMEOUTS=5000,1000,500,200,100   torchft: Lighthouse heartbeat timeouts (ms) to measure
#   BENCH_SKIP="local"                any of: trainer scale gang estimate oscillation deletion kueue local torchft
#                                     keepalive recovery realrecovery restartall (skip those parts; the last two need root:
#                                     hack/realnode.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py="$root/.venv/bin/python"
results="$root/bench/results"
export PATH="$root/.cache/bin:$root/.venv/bin:$PATH"
mkdir -p "$results"
t0=$SECONDS
say() { echo "[make bench $(( (SECONDS - t0) / 60 ))m$(( (SECONDS - t0) % 60 ))s] $*" >&2; }
skip() { [[ " ${BENCH_SKIP:-} " == *" $1 "* ]]; }

if ! skip trainer; then
  say "trainer: ddp_trainer loop vs a hand-written loop, world 1, paired alternations (ddp_trainer.bench_gpu's loops)"
  rm -f "$results/trainer.json"
  "$py" "$root/bench/trainer_overhead.py" --out "$results/trainer_overhead.json" --pairs "${BENCH_TRAINER_PAIRS:-15}"
  say "trainer: ddp_trainer.report's report() per step vs none, paired alternations (tensor op, matmul, user-loop step)"
  "$py" "$root/bench/report_overhead.py" --out "$results/report_overhead.json" --pairs "${BENCH_REPORT_PAIRS:-41}"
  for world in 1 2; do
    say "trainer: gloo world $world, gradient accumulation 1, 2, 4"
    "$py" -m torch.distributed.run --standalone --nproc-per-node "$world" "$root/bench/trainer_scaling.py" \
      --out "$results/trainer_scaling_w$world.json" --steps "${BENCH_TRAINER_STEPS:-30}" \
      --repeats "${BENCH_TRAINER_REPEATS:-5}"
  done
  say "trainer: a periodic checkpoint's step stall, file vs dcp sync vs dcp async (gloo world 2, gpt ~50M parameters)"
  "$py" -m torch.distributed.run --standalone --nproc-per-node 2 "$root/bench/checkpoint_stall.py" \
    --out "$results/checkpoint_stall.json"
  say "trainer: how long a dcp save blocks the step, async (one copy into reused buffers) vs sync (gloo world 2)"
  "$py" -m torch.distributed.run --standalone --nproc-per-node 2 "$root/bench/checkpoint_save_block.py" \
    --out "$results/checkpoint_save_block.json"
  (cd "$root/bench" && "$py" trainer_summary.py "$results")
fi

if ! skip scale; then
  args=()
  for w in ${BENCH_WORKLOADS:-1000x2 100x16}; do args+=(--workload "$w"); done
  say "operator scale + recovery at scale: ${BENCH_WORKLOADS:-1000x2 100x16} on ${BENCH_NODES:-250} kwok nodes"
  "$py" "$root/bench/operator_scale.py" "${args[@]}" --nodes "${BENCH_NODES:-250}" \
    --steady-seconds "${BENCH_STEADY_SECONDS:-300}" --cache-pods "${BENCH_CACHE_PODS:-10000}" \
    --out "$results/operator_scale.json"
fi

if ! skip gang; then
  say "gang placement under contention: ${BENCH_GANG_JOBS:-12} jobs x 4 pods x 8 GPUs on ${BENCH_GANG_NODES:-8} kwok nodes, gang on vs off"
  "$py" "$root/bench/gang_contention.py" --out "$results/gang_contention.json" --jobs "${BENCH_GANG_JOBS:-12}" \
    --nodes "${BENCH_GANG_NODES:-8}"
fi

if ! skip estimate; then
  say "capacity estimate: one elastic pass over 1,000 nodes and 10,000 bound pods, idle and after one pod event, this tree vs before its caches"
  "$py" "$root/bench/capacity_estimate.py" --out "$results/capacity_estimate.json"
fi

if ! skip oscillation; then
  say "capacity oscillation: ${BENCH_OSCILLATION_SECONDS:-300}s of a filler every 20 s under an elastic 2..4 job, this tree vs before the settling rules"
  "$py" "$root/bench/capacity_oscillation.py" --out "$results/capacity_oscillation.json" \
    --seconds "${BENCH_OSCILLATION_SECONDS:-300}"
fi

if ! skip kueue; then
  say "kueue: ${BENCH_KUEUE_JOBS:-100} 2 x 8-GPU jobs on a quota for ${BENCH_KUEUE_QUOTA:-10}, DDPJob vs Kueue's batch/v1 Job"
  bash "$root/hack/build-tools.sh" kueue
  "$py" "$root/bench/kueue_queue.py" --out "$results/kueue_queue.json" --jobs "${BENCH_KUEUE_JOBS:-100}" \
    --quota "${BENCH_KUEUE_QUOTA:-10}" --run-seconds "${BENCH_KUEUE_RUN_SECONDS:-10}"
fi

if ! skip progress; then
  say "progress writes: ${BENCH_PROGRESS_JOBS:-1000} Running jobs reporting progress, status writes/s and STEP staleness, this tree vs before the back-off"
  "$py" "$root/bench/progress_writes.py" --out "$results/progress_writes.json" --jobs "${BENCH_PROGRESS_JOBS:-1000}"
fi

if ! skip deletion; then
  say "deletion: a namespace with ${BENCH_DELETION_JOBS:-100} running 2-pod jobs, and delete ddpj --all, vs bare pods"
  "$py" "$root/bench/namespace_deletion.py" --out "$results/namespace_deletion.json" \
    --jobs "${BENCH_DELETION_JOBS:-100}" --nodes 30
fi

if ! skip local; then
  say "local recovery: the demo's mid-run kill on the shared local cluster (namespace ddpjob-bench-recovery)"
  demo_log=$(mktemp)
  if DEMO_NAMESPACE=ddpjob-bench-recovery bash "$root/hack/demo.sh" | tee "$demo_log"; then
    "$py" "$root/bench/local_recovery.py" "$demo_log" "$results/local_recovery.json"
  else
    say "the demo failed: local recovery not measured (its output: $demo_log)"
  fi
fi

if ! skip torchft; then
  say "torchft heartbeat: 2 replica groups, kill -9 of one; the survivor's stall and false evictions under load per Lighthouse heartbeat timeout"
  "$py" "$root/bench/torchft_heartbeat.py" --out "$results/torchft_heartbeat.json" \
    --timeouts "${BENCH_TORCHFT_TIMEOUTS:-5000,1000,500,200,100}"
fi

if ! skip keepalive; then
  say "InPlace's rendezvous keep-alive: a living agent's heartbeat age under load, a living agent taken for dead, and" \
    "a lost node's re-form, per keep-alive and last call (three torchrun agents, 0 and 8 busy processes beside them)"
  ka=("$py" "$root/bench/rendezvous_keepalive.py" --out "$results/rendezvous_keepalive.json")
  "${ka[@]}" --keep-alive 2 3 --keep-alive 1 3 --last-call 5 --hogs 0 8 --seconds 90
  "${ka[@]}" --append --keep-alive 2 3 --last-call 5 --hogs 0 8 --seconds 60 --kill-agent
  "${ka[@]}" --append --keep-alive 1 3 --last-call 2 --hogs 0 8 --seconds 60 --kill-agent
  "${ka[@]}" --append --keep-alive 2 3 --last-call 2 --hogs 0 8 --seconds 60 --kill-agent  # the operator's setting
  "${ka[@]}" --append --keep-alive 1 3 --last-call 2 --hogs 0 --seconds 75 --starve-agent 6
fi

if ! skip recovery; then
  say "recovery by fault and strategy: kill -9, delete pod, stop node, a silent node x Recreate, InPlace, TorchFT," \
    "TorchFT+InPlace (kill), and TorchFT's Lighthouse lost, on three local nodes"
  PYTHONPATH="$root/tests" "$py" "$root/bench/recovery_modes.py" --out "$results/recovery_modes.json" \
    --faults kill delete node freeze lighthouse lighthouse-pod
fi

if ! skip realrecovery; then
  say "recovery by fault and strategy on the two real nodes (kubelets with containerd, the trainer image)"
  PYTHONPATH="$root/tests" "$py" "$root/bench/recovery_modes.py" --nodes real --out "$results/recovery_modes_real.json"
fi

if ! skip restartall; then
  say "KEP-5532 on a real node: the kubelet restarting a pod's containers in place vs the pod recreated"
  PYTHONPATH="$root/tests" "$py" "$root/bench/restart_all_containers.py" --out "$results/restart_all_containers.json"
fi

say "plots and summary"
"$py" "$root/bench/plots.py" --results "$results"
"$py" "$root/bench/summary.py" --results "$results" --docs "$root/docs/benchmarks.md" | tee "$results/summary.md"
say "done in $((SECONDS - t0))s; results in bench/results"
