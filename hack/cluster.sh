#!/usr/bin/env bash
# The local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, all built
# from official Go modules by hack/build-tools.sh, bound to 127.0.0.1 only.
#
#   hack/cluster.sh up        start (or reuse a healthy) cluster and wait until it is ready
#   hack/cluster.sh down      stop exactly the processes `up` started (pid files) and remove their state
#   hack/cluster.sh status    say whether it is up
#   hack/cluster.sh stop|start COMPONENT   stop or start one component (fault-injection tests)
#
# Everything lives in $CLUSTER_DIR (default .local-cluster/). Ports and sizes can be overridden:
#   NODES=4 GPUS_PER_NODE=8 ETCD_PORT=23790 APISERVER_PORT=26443 KCM_PORT=20257 SCHED_PORT=20259 KWOK_PORT=20247
#   KWOK_CIDR=127.244.0.0/16 (the simulated pods' addresses; a second cluster on this machine takes another range)
# GANG_SCHEDULING=1 (default) serves Kubernetes v1.36's alpha gang scheduling: the scheduling.k8s.io/v1alpha2
# PodGroup API (feature gate GenericWorkload on the apiserver, the controller-manager, which runs the PodGroup
# protection finalizer, and the scheduler; GangScheduling on the scheduler). GANG_SCHEDULING=0 starts a cluster
# without it (tests of the operator's fallback restart the apiserver that way). GANG_SCHEDULING=api serves the API
# but starts the scheduler at its default feature gates, as a cluster whose scheduler ignores PodGroups (a test of the
# operator's gang discovery restarts the scheduler that way).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/.cache/bin"
dir=${CLUSTER_DIR:-$root/.local-cluster}
logs_hint="$dir/logs"
# shellcheck source=hack/lib.sh
source "$root/hack/lib.sh"
NODES=${NODES:-4}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
ETCD_PORT=${ETCD_PORT:-23790}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-23800}
APISERVER_PORT=${APISERVER_PORT:-26443}
KCM_PORT=${KCM_PORT:-20257}
SCHED_PORT=${SCHED_PORT:-20259}
KWOK_PORT=${KWOK_PORT:-20247}
KWOK_CIDR=${KWOK_CIDR:-127.244.0.0/16}
GANG_SCHEDULING=${GANG_SCHEDULING:-1}
if [[ $GANG_SCHEDULING == 1 || $GANG_SCHEDULING == api ]]; then
  APISERVER_GANG="--feature-gates=GenericWorkload=true --runtime-config=scheduling.k8s.io/v1alpha2=true"
  KCM_GANG="--feature-gates=GenericWorkload=true"
  # SchedulerPopFromBackoffQ (beta, on by default) with the gang plugin: a gang that cannot be placed goes to the
  # backoff queue after every attempt and is popped at once while nothing else waits. v1.36.3 then retried it
  # about 3,000 times a second, one core busy, for as long as it waited (docs/placement.md).
  SCHED_GANG="--feature-gates=GenericWorkload=true,GangScheduling=true,SchedulerPopFromBackoffQ=false"
  # A scheduler left at its defaults (both gates are alpha, off): it never looks at a pod's schedulingGroup.
  [[ $GANG_SCHEDULING == api ]] && SCHED_GANG=""
else
  APISERVER_GANG="" KCM_GANG="" SCHED_GANG=""
fi
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

kubectl_() { "$bin/kubectl" --kubeconfig "$dir/kubeconfig" "$@"; }


# --- certificates -------------------------------------------------------------------------------------------
gen_cert() { # gen_cert NAME SUBJECT [SAN]
  local name=$1 subj=$2 san=${3:-}
  local pki="$dir/pki"
  [[ -f "$pki/$name.crt" ]] && return 0
  openssl genrsa -out "$pki/$name.key" 2048 2>/dev/null
  openssl req -new -key "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
  local ext="$pki/$name.ext"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [[ -n "$san" ]]; then echo "extendedKeyUsage=serverAuth,clientAuth"; echo "subjectAltName=$san"
    else echo "extendedKeyUsage=clientAuth"; fi
  } >"$ext"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr" "$ext"
}

write_kubeconfig() { # write_kubeconfig FILE CERTNAME
  local file=$1 cert=$2
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: ddpjob-local
  cluster:
    server: https://127.0.0.1:${APISERVER_PORT}
    certificate-authority: $dir/pki/ca.crt
users:
- name: $cert
  user:
    client-certificate: $dir/pki/$cert.crt
    client-key: $dir/pki/$cert.key
contexts:
- name: ddpjob-local
  context: {cluster: ddpjob-local, user: $cert}
current-context: ddpjob-local
EOF
}

make_pki() {
  local pki="$dir/pki"
  mkdir -p "$pki"
  if [[ ! -f "$pki/ca.crt" ]]; then
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -out "$pki/ca.crt" -days 3650 \
      -subj "/CN=ddpjob-local-ca" 2>/dev/null
  fi
  gen_cert apiserver "/CN=kube-apiserver" \
    "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  gen_cert admin "/O=system:masters/CN=ddpjob-admin"
  gen_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  gen_cert controller-manager "/CN=system:kube-controller-manager"
  gen_cert scheduler "/CN=system:kube-scheduler"
  gen_cert kwok "/O=system:masters/CN=kwok-controller"
  [[ -f "$pki/sa.key" ]] || { openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null; openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null; }
  write_kubeconfig "$dir/kubeconfig" admin
  write_kubeconfig "$dir/controller-manager.kubeconfig" controller-manager
  write_kubeconfig "$dir/scheduler.kubeconfig" scheduler
  write_kubeconfig "$dir/kwok.kubeconfig" kwok
}

# --- processes ----------------------------------------------------------------------------------------------
cmdline() {
  local pki="$dir/pki"
  local ENDPOINTSLICES=",-endpointslice-controller"
  [[ -f "$dir/realnodes/endpointslices" ]] && ENDPOINTSLICES=""
  case $1 in
    etcd) echo "$bin/etcd --name=ddpjob-local --data-dir=$dir/etcd \
      --listen-client-urls=http://127.0.0.1:$ETCD_PORT --advertise-client-urls=http://127.0.0.1:$ETCD_PORT \
      --listen-peer-urls=http://127.0.0.1:$ETCD_PEER_PORT --initial-advertise-peer-urls=http://127.0.0.1:$ETCD_PEER_PORT \
      --initial-cluster=ddpjob-local=http://127.0.0.1:$ETCD_PEER_PORT --unsafe-no-fsync --quota-backend-bytes=4294967296 \
      --log-level=warn" ;;
    # --endpoint-reconciler-type=none: the apiserver listens on loopback only, and the API refuses loopback
    # addresses in the `kubernetes` Service's endpoints, so reconciling them only logs an error every 10 s.
    kube-apiserver) echo "$bin/kube-apiserver --etcd-servers=http://127.0.0.1:$ETCD_PORT \
      --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=$APISERVER_PORT \
      --tls-cert-file=$pki/apiserver.crt --tls-private-key-file=$pki/apiserver.key --client-ca-file=$pki/ca.crt \
      --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction,ExtendedResourceToleration \
      --service-account-key-file=$pki/sa.pub --service-account-signing-key-file=$pki/sa.key \
      --service-account-issuer=https://kubernetes.default.svc.cluster.local --api-audiences=https://kubernetes.default.svc.cluster.local \
      --service-cluster-ip-range=10.96.0.0/16 --allow-privileged=true \
      --kubelet-client-certificate=$pki/apiserver-kubelet-client.crt --kubelet-client-key=$pki/apiserver-kubelet-client.key \
      --kubelet-preferred-address-types=InternalIP,Hostname --profiling=false --max-requests-inflight=1000 \
      --max-mutating-requests-inflight=500 --endpoint-reconciler-type=none $APISERVER_GANG --v=1" ;;
    # No endpoints/EndpointSlice controllers: nothing here resolves a Service through them (the local node writes
    # /etc/hosts; kwok pods are not reached), and they refuse loopback pod IPs with a warning event on every job.
    # Real nodes (hack/realnode.sh) need EndpointSlices, for kube-proxy and cluster DNS: while they run (the file
    # realnodes/endpointslices exists) the controller-manager runs the EndpointSlice controller.
    kube-controller-manager) echo "$bin/kube-controller-manager --kubeconfig=$dir/controller-manager.kubeconfig \
      --authentication-kubeconfig=$dir/controller-manager.kubeconfig --authorization-kubeconfig=$dir/controller-manager.kubeconfig \
      --bind-address=127.0.0.1 --secure-port=$KCM_PORT --leader-elect=false --use-service-account-credentials=true \
      --service-account-private-key-file=$pki/sa.key --root-ca-file=$pki/ca.crt \
      --cluster-signing-cert-file=$pki/ca.crt --cluster-signing-key-file=$pki/ca.key \
      --controllers=*,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller,-endpoints-controller,-endpointslice-mirroring-controller$ENDPOINTSLICES \
      --kube-api-qps=200 --kube-api-burst=400 --concurrent-gc-syncs=40 --node-monitor-grace-period=30s --profiling=false $KCM_GANG --v=1" ;;
    kube-scheduler) echo "$bin/kube-scheduler --kubeconfig=$dir/scheduler.kubeconfig \
      --authentication-kubeconfig=$dir/scheduler.kubeconfig --authorization-kubeconfig=$dir/scheduler.kubeconfig \
      --bind-address=127.0.0.1 --secure-port=$SCHED_PORT --leader-elect=false --kube-api-qps=300 --kube-api-burst=600 \
      --profiling=false $SCHED_GANG --v=1" ;;
    # Simulated pods and nodes get loopback addresses: a progress scrape of a kwok pod's metrics port stays on this
    # machine (and is refused at once) instead of going to a private-range address.
    kwok) echo "$bin/kwok --kubeconfig=$dir/kwok.kubeconfig --config=$root/hack/kwok-stages.yaml \
      --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
      --node-lease-duration-seconds=40 --cidr=$KWOK_CIDR --node-ip=127.0.0.1 --server-address=127.0.0.1:$KWOK_PORT" ;;
    *) echo "unknown component $1" >&2; return 1 ;;
  esac
}

start_component() {
  local name=$1
  if pid_alive "$name"; then return 0; fi
  mkdir -p "$dir/pids" "$dir/logs"
  # setsid: the component outlives the make/pytest process that started it; its pid is recorded for `down`.
  # shellcheck disable=SC2046
  setsid $(cmdline "$name") >>"$dir/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$dir/pids/$name.pid"
}

stop_component() {
  local name=$1 f="$dir/pids/$1.pid"
  [[ -f "$f" ]] || return 0
  local pid; pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}


etcd_healthy() { curl -sf "http://127.0.0.1:$ETCD_PORT/health" | grep -q true; }
apiserver_ready() { kubectl_ get --raw /readyz; }
# Ready once its informers have synced and its event handlers run: a pod made before that (a restart between two
# tests) can wait out a gang's quorum with no event left to requeue it.
scheduler_ready() { curl -skf "https://127.0.0.1:$SCHED_PORT/readyz" >/dev/null; }
default_sa() { kubectl_ -n default get serviceaccount default; }
nodes_ready() {
  local want=$1 got
  got=$(kubectl_ get nodes -l type=kwok -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True || true)
  [[ "$got" -ge "$want" ]]
}

healthy() {
  for c in "${COMPONENTS[@]}"; do pid_alive "$c" || return 1; done
  apiserver_ready >/dev/null 2>&1
}

create_nodes() {
  local i manifest=""
  for ((i = 0; i < NODES; i++)); do
    manifest+="---
apiVersion: v1
kind: Node
metadata:
  name: gpu-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
  labels:
    type: kwok
    kubernetes.io/hostname: gpu-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    node.kubernetes.io/instance-type: sim-gpu-${GPUS_PER_NODE}x
    nvidia.com/gpu.present: \"true\"
    nvidia.com/gpu.count: \"$GPUS_PER_NODE\"
    nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
spec:
  taints:
  - {key: nvidia.com/gpu, value: present, effect: NoSchedule}
status:
  capacity: {cpu: \"64\", memory: 512Gi, pods: \"110\", nvidia.com/gpu: \"$GPUS_PER_NODE\"}
  allocatable: {cpu: \"64\", memory: 512Gi, pods: \"110\", nvidia.com/gpu: \"$GPUS_PER_NODE\"}
"
  done
  [[ -n "$manifest" ]] && printf '%s' "$manifest" | kubectl_ apply -f - >/dev/null
}

up() {
  if healthy; then
    log "reusing the healthy local cluster in $dir"
  else
    [[ -d "$dir/pids" ]] && { log "cluster in $dir is not healthy: restarting it"; down_processes; }
    local t0=$SECONDS
    for t in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok; do
      [[ -x "$bin/$t" ]] || { log "missing $bin/$t: run 'make tools'"; exit 1; }
    done
    mkdir -p "$dir"
    make_pki
    start_component etcd
    wait_for 30 etcd etcd_healthy
    start_component kube-apiserver
    wait_for 60 kube-apiserver apiserver_ready
    start_component kube-controller-manager
    start_component kube-scheduler
    start_component kwok
    wait_for 60 kube-scheduler scheduler_ready
    # The apiserver refuses pods in a namespace until its default ServiceAccount exists.
    wait_for 60 "default ServiceAccount" default_sa
    log "control plane ready in $((SECONDS - t0))s"
  fi
  create_nodes
  wait_for 60 "$NODES Ready kwok nodes" nodes_ready "$NODES"
  cat >&2 <<EOF
>> local cluster is up ($NODES simulated nodes x $GPUS_PER_NODE nvidia.com/gpu)
   export KUBECONFIG=$dir/kubeconfig PATH=$bin:\$PATH
   kubectl get nodes
EOF
}

down_processes() {
  local i
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do stop_component "${COMPONENTS[$i]}"; done
}

down() {
  # Real nodes first (hack/realnode.sh): their containers, mounts, bridges and cgroups outlive a killed kubelet.
  [[ -d "$dir/realnodes" ]] && bash "$root/hack/realnode.sh" down
  down_processes
  # Extra processes registered by the project's other tools (operator, local node agent) also leave pid files.
  if [[ -d "$dir/pids" ]]; then
    for f in "$dir"/pids/*.pid; do [[ -e "$f" ]] && stop_component "$(basename "$f" .pid)"; done
  fi
  rm -rf "$dir"
  log "local cluster stopped and its state removed"
}

status() {
  local c
  for c in "${COMPONENTS[@]}"; do
    if pid_alive "$c"; then echo "$c: running (pid $(cat "$dir/pids/$c.pid"))"; else echo "$c: stopped"; fi
  done
  if healthy; then echo "cluster: ready (KUBECONFIG=$dir/kubeconfig)"; else echo "cluster: not ready"; return 1; fi
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  stop) stop_component "$2" ;;
  start)
    start_component "$2"
    case $2 in
      kube-apiserver) wait_for 60 kube-apiserver apiserver_ready ;;
      kube-scheduler) wait_for 60 kube-scheduler scheduler_ready ;;
    esac ;;
  kubeconfig) echo "$dir/kubeconfig" ;;
  *) echo "usage: $0 up|down|status|stop NAME|start NAME|kubeconfig" >&2; exit 2 ;;
esac
