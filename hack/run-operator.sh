#!/usr/bin/env bash
# Install the DDPJob CRD and run the operator in the foreground against $KUBECONFIG, or the local cluster's
# kubeconfig when that is unset. Extra arguments go to the operator (e.g. --namespace NS, --metrics-port 9090).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export PATH="$root/.cache/bin:$root/.venv/bin:$PATH"
export KUBECONFIG=${KUBECONFIG:-$root/.local-cluster/kubeconfig}
[[ -f "$KUBECONFIG" ]] || { echo ">> no kubeconfig at $KUBECONFIG: run 'make cluster-up' or set KUBECONFIG" >&2; exit 1; }
py="$root/.venv/bin/python"
"$py" -c "import ddpjob_operator" 2>/dev/null || "$root/.venv/bin/pip" install -q -e "$root/operator"
kubectl apply --server-side --force-conflicts -f "$root/crds" >&2
kubectl wait --for=condition=Established --timeout=60s crd/ddpjobs.ddpjob.dev >/dev/null
kubectl apply --server-side --force-conflicts -f "$root/charts/ddpjob-operator/files/queue-label-policy" >&2
echo ">> ddpjob-operator against $KUBECONFIG (metrics :${METRICS_PORT:-8080}, liveness :${LIVENESS_PORT:-8081})" >&2
exec "$py" -m ddpjob_operator --metrics-port "${METRICS_PORT:-8080}" --liveness-port "${LIVENESS_PORT:-8081}" "$@"
