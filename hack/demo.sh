#!/usr/bin/env bash
# `make demo`: the local cluster + the embedded local node + the operator, then a 2x2 digits DDPJob with a
# mid-run kill of one trainer process (hack/demo.py). `make` has already run setup.
#   DEMO_KILL=0           do not kill a worker
#   DEMO_KEEP_CLUSTER=1   leave the cluster, local node and operator running afterwards (default: tear down)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export PATH="$root/.cache/bin:$root/.venv/bin:$PATH"
export KUBECONFIG="$root/.local-cluster/kubeconfig"
py="$root/.venv/bin/python"
t0=$SECONDS

bash "$root/hack/cluster.sh" up
"$py" -m ddpjob_localnode start
rc=0
"$py" "$root/hack/demo.py" || rc=$?

if [[ "${DEMO_KEEP_CLUSTER:-0}" == 1 ]]; then
  echo ">> cluster, local node and operator left running (DEMO_KEEP_CLUSTER=1):"
  echo "   export KUBECONFIG=$KUBECONFIG PATH=$root/.cache/bin:\$PATH"
  echo "   kubectl -n ${DEMO_NAMESPACE:-ddpjob-demo} get ddpj,pods -o wide; make cluster-down when done"
else
  # cluster.sh down also stops the local node agent and the operator through their pid files.
  bash "$root/hack/cluster.sh" down
fi
echo ">> demo finished in $((SECONDS - t0)) s (exit $rc)"
exit $rc
