#!/usr/bin/env bash
# `make demo`: the local cluster + the embedded local node + the operator, then a 2x2 digits DDPJob with a
# mid-run kill of one trainer process (hack/demo.py). `make` has already run setup.
#   DEMO_KILL=0           do not kill a worker
#   DEMO_KEEP_CLUSTER=1   leave the cluster, local node and operator running afterwards (default: tear down)
#   KUBELET_NODES=2       the same demo on real nodes (hack/realnode.sh: kubelets with containerd, root): the
#                         operator image installed by Helm, the trainer image from trainer_image/Dockerfile
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export PATH="$root/.cache/bin:$root/.venv/bin:$PATH"
export KUBECONFIG="$root/.local-cluster/kubeconfig"
py="$root/.venv/bin/python"
t0=$SECONDS

# A cluster that was already up (tests, another session) is reused and left running whatever DEMO_KEEP_CLUSTER says.
was_up=0
bash "$root/hack/cluster.sh" status >/dev/null 2>&1 && was_up=1
agent_was_up=0
"$py" -m ddpjob_localnode status >/dev/null 2>&1 && agent_was_up=1
bash "$root/hack/cluster.sh" up
real=${KUBELET_NODES:-0}
if ((real > 0)); then
  # The tools and images are made from pins and our own Dockerfiles, each only when its inputs changed.
  bash "$root/hack/build-tools.sh" node
  bash "$root/hack/install-node-packages.sh"
  for image in base operator trainer; do bash "$root/hack/images.sh" "$image"; done
  bash "$root/hack/realnode.sh" up "$real"
  bash "$root/hack/images.sh" load
  export DEMO_OPERATOR_IMAGE DEMO_TRAINER_IMAGE
  DEMO_OPERATOR_IMAGE=$(bash "$root/hack/images.sh" operator-ref)
  DEMO_TRAINER_IMAGE=$(bash "$root/hack/images.sh" trainer-ref)
else
  "$py" -m ddpjob_localnode start --all   # LOCAL_NODES=N: N agents sharing this machine (default 1)
fi
rc=0
"$py" "$root/hack/demo.py" || rc=$?

if [[ $was_up == 1 ]]; then
  echo ">> the cluster was already up before the demo: left running (operator log: .local-cluster/logs/operator.log)"
  if [[ "${DEMO_KEEP_CLUSTER:-0}" != 1 ]]; then
    pid_file="$root/.local-cluster/pids/operator.pid"
    [[ -f $pid_file ]] && { kill "$(cat "$pid_file")" 2>/dev/null || true; rm -f "$pid_file"; }
    [[ $agent_was_up == 1 ]] || "$py" -m ddpjob_localnode stop --all
    ((real > 0)) && "$py" "$root/hack/demo.py" --uninstall
  fi
elif [[ "${DEMO_KEEP_CLUSTER:-0}" == 1 ]]; then
  echo ">> cluster, local node and operator left running (DEMO_KEEP_CLUSTER=1):"
  echo "   export KUBECONFIG=$KUBECONFIG PATH=$root/.cache/bin:\$PATH"
  echo "   kubectl -n ${DEMO_NAMESPACE:-ddpjob-demo} get ddpj,pods -o wide; make cluster-down when done"
else
  # cluster.sh down also stops the local node agent and the operator through their pid files.
  bash "$root/hack/cluster.sh" down
fi
echo ">> demo finished in $((SECONDS - t0)) s (exit $rc)"
exit $rc
