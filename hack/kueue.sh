#!/usr/bin/env bash
# Kueue on the local cluster: its manager (built by `hack/build-tools.sh kueue` from sigs.k8s.io/kueue, pinned in
# hack/tools/kueue/go.mod) runs as a local process beside the control plane, with the CRDs of the same module
# version. See docs/kueue.md.
#
#   hack/kueue.sh up       install the CRDs and webhooks, start the manager (restarted if its settings changed)
#   hack/kueue.sh down     stop it (the CRDs stay; `hack/cluster.sh down` removes everything)
#   hack/kueue.sh status   say whether it is up
#
# Settings: KUEUE_WEBHOOK_PORT=29443 KUEUE_METRICS_PORT=28080 KUEUE_HEALTH_PORT=28081
#   KUEUE_PODS_READY_TIMEOUT=5m (waitForPodsReady: an admitted job whose pods do not all run by then is evicted
#   and queued again)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/.cache/bin"
dir=${CLUSTER_DIR:-$root/.local-cluster}
kdir="$dir/kueue"
KUEUE_WEBHOOK_PORT=${KUEUE_WEBHOOK_PORT:-29443}
KUEUE_METRICS_PORT=${KUEUE_METRICS_PORT:-28080}
KUEUE_HEALTH_PORT=${KUEUE_HEALTH_PORT:-28081}
KUEUE_PODS_READY_TIMEOUT=${KUEUE_PODS_READY_TIMEOUT:-5m}
# Kueue's manager reads its metrics certificate from this fixed path unless it manages certificates itself, which
# needs an in-cluster Service the API server can route to (this cluster has no Service routing).
METRICS_CERTS=/etc/kueue/metrics/certs

log() { echo ">> $*" >&2; }
kubectl_() { "$bin/kubectl" --kubeconfig "$dir/kubeconfig" "$@"; }
pid_alive() { local f="$dir/pids/kueue.pid"; [[ -f "$f" ]] && kill -0 "$(cat "$f")" 2>/dev/null; }
ready() { curl -sf "http://127.0.0.1:$KUEUE_HEALTH_PORT/readyz" >/dev/null; }

module_dir() {
  (cd "$root/hack/tools/kueue" && GOFLAGS=-mod=mod GOTOOLCHAIN=local GONOSUMDB=sigs.k8s.io/scheduler-library \
    go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
}

certs() { # a serving certificate for 127.0.0.1 signed by the cluster's CA, for the webhooks and for metrics
  local pki="$dir/pki"
  mkdir -p "$kdir/certs"
  if [[ ! -f "$kdir/certs/tls.crt" ]]; then
    openssl genrsa -out "$kdir/certs/tls.key" 2048 2>/dev/null
    openssl req -new -key "$kdir/certs/tls.key" -subj "/CN=kueue-webhook" -out "$kdir/tls.csr" 2>/dev/null
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n' >"$kdir/tls.ext"
    openssl x509 -req -in "$kdir/tls.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 3650 \
      -sha256 -extfile "$kdir/tls.ext" -out "$kdir/certs/tls.crt" 2>/dev/null
    rm -f "$kdir/tls.csr" "$kdir/tls.ext"
  fi
  if ! mkdir -p "$METRICS_CERTS" 2>/dev/null || ! cp "$kdir/certs/tls.crt" "$kdir/certs/tls.key" "$METRICS_CERTS/"; then
    log "Kueue's manager needs its metrics certificate in $METRICS_CERTS (a path fixed in Kueue), which is not writable here"
    exit 1
  fi
}

config() {
  cat <<EOF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: 127.0.0.1:$KUEUE_HEALTH_PORT
metrics:
  bindAddress: 127.0.0.1:$KUEUE_METRICS_PORT
webhook:
  host: 127.0.0.1
  port: $KUEUE_WEBHOOK_PORT
  certDir: $kdir/certs
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
waitForPodsReady:
  timeout: $KUEUE_PODS_READY_TIMEOUT
  blockAdmission: false
  requeuingStrategy:
    timestamp: Eviction
    backoffBaseSeconds: 5
    backoffMaxSeconds: 30
integrations:
  frameworks: ["batch/job"]
  # DDPJob's own operator creates its Workloads and pods (operator/src/ddpjob_operator/admission/kueue.py).
  externalFrameworks: ["DDPJob.v1alpha1.ddpjob.dev"]
EOF
}

install_api() { # CRDs and webhook configurations from the module, the webhooks pointed at 127.0.0.1
  local mod; mod=$(module_dir)
  kubectl_ apply --server-side --force-conflicts -f "$mod/config/components/crd/bases" >/dev/null
  kubectl_ wait --for=condition=Established --timeout=60s -f "$mod/config/components/crd/bases" >/dev/null
  kubectl_ create namespace kueue-system --dry-run=client -o yaml | kubectl_ apply -f - >/dev/null
  "$root/.venv/bin/python" "$root/hack/kueue_webhooks.py" "$mod/config/components/webhook/manifests.yaml" \
    "https://127.0.0.1:$KUEUE_WEBHOOK_PORT" "$dir/pki/ca.crt" | kubectl_ apply --server-side --force-conflicts -f - >/dev/null
}

up() {
  [[ -x "$bin/kueue" ]] || { log "missing $bin/kueue: run 'bash hack/build-tools.sh kueue' (or make kueue-up)"; exit 1; }
  kubectl_ get --raw /readyz >/dev/null 2>&1 || { log "the local cluster is not up: run 'make cluster-up' first"; exit 1; }
  mkdir -p "$kdir" "$dir/pids" "$dir/logs"
  local want; want=$(config | sha256sum | cut -c1-16)
  if pid_alive && [[ "$(cat "$kdir/config.sha" 2>/dev/null)" == "$want" ]] && ready; then
    log "reusing the running Kueue manager"
    return 0
  fi
  down
  local t0=$SECONDS
  certs
  config >"$kdir/config.yaml"
  install_api
  # VisibilityOnDemand would start an aggregated API server of its own: not needed here.
  setsid "$bin/kueue" --config="$kdir/config.yaml" --feature-gates=VisibilityOnDemand=false --zap-log-level=2 \
    --kubeconfig="$dir/kubeconfig" >>"$dir/logs/kueue.log" 2>&1 </dev/null &
  echo $! >"$dir/pids/kueue.pid"
  echo "$want" >"$kdir/config.sha"
  for _ in $(seq 1 120); do
    if ready; then log "Kueue manager ready in $((SECONDS - t0))s (log: $dir/logs/kueue.log)"; return 0; fi
    pid_alive || { tail -20 "$dir/logs/kueue.log" >&2; log "Kueue manager exited"; exit 1; }
    sleep 0.5
  done
  log "Kueue manager not ready after 60s"; tail -20 "$dir/logs/kueue.log" >&2; exit 1
}

down() { # the same stop as the cluster's components: TERM, 5 s, KILL; its pid file is removed
  CLUSTER_DIR="$dir" bash "$root/hack/cluster.sh" stop kueue
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) if pid_alive && ready; then echo "kueue: running (pid $(cat "$dir/pids/kueue.pid"))"; else echo "kueue: stopped"; exit 1; fi ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
