#!/usr/bin/env bash
# Real nodes for the local cluster: each a kubelet of the control plane's own release (v1.36) with a containerd 2.x
# of its own, runc (Debian's) and the CNI bridge plugin, all built by `hack/build-tools.sh node` from official Go
# modules. Needs root (containerd, mounts, network namespaces, cgroups); docs/real-nodes.md says what else.
#
#   hack/realnode.sh up N     start nodes realnode-0..N-1 on the running local cluster and wait until Ready
#   hack/realnode.sh down     stop them and remove every process, container, mount, network namespace, bridge,
#                             iptables rule and cgroup they made
#   hack/realnode.sh status   say which are up
#   hack/realnode.sh left     print what of theirs is still on the machine (nothing after `down`)
#   hack/realnode.sh stop I | start I    stop or start node I's kubelet only (a lost node; its pods run on)
#   hack/realnode.sh freeze I | thaw I   stop or resume every container of node I at once (cgroup freezer): with
#                             stop, a node gone silent, as one that lost its power or its network
#   hack/realnode.sh crictl I ARGS...    crictl against node I's containerd (what runs there, whatever the API says)
#
# Two nodes share this machine's kernel, so each has its own of everything a kubelet or containerd would take
# for its own: state, root and socket directories, kubelet ports, a cgroup root (/ddpjob-realnode-I in every
# controller), a bridge (ddpjbrI) and a pod range (10.244.I.0/24). The bridge's gateway, 10.244.I.1, is the node's
# InternalIP (the kubelet refuses a loopback one): an address inside this machine, where the kubelet listens. Pods get routes to the pod and service ranges
# only, never a default route; nothing is masqueraded; the host forwards between the pod bridges and drops every
# other forwarded packet, so nothing a pod sends leaves the machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/.cache/bin"
dir=${CLUSTER_DIR:-$root/.local-cluster}
# shellcheck source=hack/lib.sh
source "$root/hack/lib.sh"
nodes_dir="$dir/realnodes"
logs_hint="$nodes_dir/*/logs"
run_dir=${DDPJOB_REALNODE_RUN:-/run/ddpjob-realnodes} # sockets: a short path (unix sockets allow 108 bytes)
images_dir=${DDPJOB_IMAGES_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ddpjob-operator/images}
# Each node's containerd root (its image content and snapshots) is a cache outside the checkout, kept by `down`:
# the trainer image is 5.5 GB, and importing it into two containerds on every `up` would cost minutes.
store_dir=${DDPJOB_REALNODE_STORE:-${XDG_CACHE_HOME:-$HOME/.cache}/ddpjob-operator/realnodes}
APISERVER_PORT=${APISERVER_PORT:-26443}
POD_RANGE=10.244.0.0/16
SERVICE_RANGE=10.96.0.0/16
PAUSE_IMAGE=localhost/ddpjob/pause:3.10
CHAIN=DDPJOB-REALNODES
RUNC=${RUNC:-$(command -v runc || echo /usr/sbin/runc)}

kubectl_() { "$bin/kubectl" --kubeconfig "$dir/kubeconfig" "$@"; }
name_of() { echo "realnode-$1"; }
node_dir() { echo "$nodes_dir/node-$1"; }
sock_of() { echo "$run_dir/node-$1/containerd.sock"; }
crictl_() { local i=$1; shift; "$bin/crictl" --runtime-endpoint "unix://$(sock_of "$i")" --timeout 20s "$@"; }
ctr_() { local i=$1; shift; "$bin/ctr" --address "$(sock_of "$i")" --namespace k8s.io "$@"; }


# --- the pause image: built here from Kubernetes' own pause.c, as registry.k8s.io/pause is -------------------
pause_image() {
  local out="$images_dir/pause-3.10.oci.tar"
  [[ -f "$out" ]] && { echo "$out"; return 0; }
  mkdir -p "$images_dir"
  local src work
  src=$(cd "$root/hack/tools/kubelet" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux
  work=$(mktemp -d)
  gcc -Os -Wall -Werror -static -DVERSION=v3.10-ddpjob -o "$work/pause" "$src/pause.c"
  strip "$work/pause"
  local c
  c=$(buildah from scratch)
  buildah copy "$c" "$work/pause" /pause >/dev/null
  buildah config --entrypoint '["/pause"]' --user 65535:65535 "$c"
  buildah commit --rm -q "$c" "oci-archive:$out.tmp:$PAUSE_IMAGE" >/dev/null
  mv "$out.tmp" "$out"
  rm -rf "$work"
  echo "$out"
}

# --- one node -----------------------------------------------------------------------------------------------
write_node_pki() { # the kubelet's client identity: system:node:NAME in group system:nodes (Node authorizer)
  local i=$1
  write_identity "$(node_dir "$i")" kubelet "/O=system:nodes/CN=system:node:$(name_of "$i")"
}

write_node_config() {
  local i=$1 d sock
  d=$(node_dir "$i") sock=$(sock_of "$i")
  mkdir -p "$d/logs" "$d/cni-conf" "$d/cni-bin" "$d/kubelet" "$run_dir/node-$i" "$store_dir/node-$i/containerd"
  for plugin in bridge host-local loopback; do ln -sf "$bin/cni-$plugin" "$d/cni-bin/$plugin"; done
  cat >"$d/containerd.toml" <<EOF
version = 3
root = "$store_dir/node-$i/containerd"
state = "$run_dir/node-$i/containerd"
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  level = "info"
[plugins.'io.containerd.cri.v1.runtime']
  # No CAP_SYS_RESOURCE here: nothing may lower an OOM score below the daemon's own.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$RUNC"
        Root = "$run_dir/node-$i/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$d/cni-bin"]
    conf_dir = "$d/cni-conf"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE_IMAGE"
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins.'io.containerd.nri.v1.nri']
  disable = true
EOF
  cat >"$d/cni-conf/10-ddpjob.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "ddpjob-realnode-$i",
  "plugins": [{
    "type": "bridge", "bridge": "ddpjbr$i", "isGateway": true, "isDefaultGateway": false,
    "ipMasq": false, "hairpinMode": true,
    "ipam": {
      "type": "host-local", "dataDir": "$d/cni-ipam",
      "ranges": [[{"subnet": "10.244.$i.0/24", "gateway": "10.244.$i.1"}]],
      "routes": [{"dst": "$POD_RANGE"}, {"dst": "$SERVICE_RANGE"}]
    }
  }]
}
EOF
  cat >"$d/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine mounts cgroup v1 controllers and runs no systemd.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /ddpjob-realnode-$i
cgroupsPerQOS: true
containerRuntimeEndpoint: unix://$sock
address: 10.244.$i.1
port: $((20350 + i))
healthzBindAddress: 127.0.0.1
healthzPort: $((20370 + i))
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $dir/pki/ca.crt}
authorization: {mode: Webhook}
clusterDomain: cluster.local
clusterDNS: [10.96.0.10]
failSwapOn: false
protectKernelDefaults: false
serializeImagePulls: false
# The images are loaded into this node's containerd, never pulled: nothing may be garbage-collected away.
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "100Mi", nodefs.available: "2%", imagefs.available: "2%"}
podPidsLimit: 4096
# Pod logs of its own: at the default /var/log/pods each kubelet's garbage collection took the other node's pods'
# log directories for orphans and removed them, so \`kubectl logs\` of a running pod came back empty or cut.
podLogsDir: $d/pod-logs
# Only pods meant for a real node land here: the other suites' pods target kwok or the local node agents.
registerWithTaints: [{key: ddpjob.dev/real-node, value: "true", effect: NoSchedule}]
EOF
}

start_node() {
  local i=$1 name d
  name=$(name_of "$i") d=$(node_dir "$i")
  mkdir -p "$dir/pids"
  if ! pid_alive "$name-containerd"; then
    setsid "$bin/containerd" --config "$d/containerd.toml" >>"$d/logs/containerd.log" 2>&1 </dev/null &
    echo $! >"$dir/pids/$name-containerd.pid"
  fi
  wait_for 60 "$name's containerd" crictl_ "$i" version
  if ! ctr_ "$i" images ls -q | grep -qx "$PAUSE_IMAGE"; then
    ctr_ "$i" images import --no-unpack "$(pause_image)" >/dev/null
  fi
  start_kubelet "$i"
}

make_bridge() { # the node's bridge, made before its first pod: its gateway address is the node's host-only IP
  local i=$1
  ip link show "ddpjbr$i" >/dev/null 2>&1 || ip link add "ddpjbr$i" type bridge
  ip -4 addr show dev "ddpjbr$i" | grep -q "10.244.$i.1/24" || ip addr add "10.244.$i.1/24" dev "ddpjbr$i"
  ip link set "ddpjbr$i" up
}

make_cgroup_root() { # the kubelet wants its cgroupRoot to exist in every hierarchy it uses
  local i=$1 h
  for h in /sys/fs/cgroup/*/; do
    h=${h%/}
    [[ ${h##*/} == unified ]] && continue
    mkdir -p "$h/ddpjob-realnode-$i"
    if [[ -f "$h/cpuset.cpus" ]]; then # a new cpuset starts empty: no task may join it until it has CPUs and mems
      cat "$h/cpuset.cpus" >"$h/ddpjob-realnode-$i/cpuset.cpus"
      cat "$h/cpuset.mems" >"$h/ddpjob-realnode-$i/cpuset.mems"
    fi
    # A cgroup weighs as one task of the root (1024 shares) against every busy process outside it: a node that
    # owns the machine's CPUs weighs as one busy process per CPU, so that its pods are not starved by whatever else
    # runs here (make test's other lanes). The kubelet shares it out below, by its pods' requests.
    if [[ -f "$h/cpu.shares" ]]; then
      echo $((1024 * $(nproc))) >"$h/ddpjob-realnode-$i/cpu.shares"
    fi
  done
}

start_kubelet() {
  local i=$1 name d
  name=$(name_of "$i") d=$(node_dir "$i")
  pid_alive "$name-kubelet" && return 0
  make_cgroup_root "$i"
  make_bridge "$i"
  PATH="$bin:$PATH" setsid "$bin/kubelet" --config="$d/kubelet.yaml" --kubeconfig="$d/kubelet.kubeconfig" \
    --root-dir="$d/kubelet" --cert-dir="$d/pki" --hostname-override="$name" --node-ip="10.244.$i.1" \
    --node-labels="ddpjob.dev/real-node=true,ddpjob.dev/pod-range=10.244.$i.0-24" \
    --v=1 \
    >>"$d/logs/kubelet.log" 2>&1 </dev/null &
  echo $! >"$dir/pids/$name-kubelet.pid"
}

stop_pid() { # TERM, up to 10 s, then KILL: cluster.sh's own stop of a component by its pid file
  CLUSTER_DIR=$dir bash "$root/hack/cluster.sh" stop "$1"
}

node_ready() {
  [[ $(kubectl_ get node "$(name_of "$1")" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

# --- the host's side: forwarding between the pod bridges only ------------------------------------------------
open_forwarding() {
  mkdir -p "$nodes_dir"
  [[ -f "$nodes_dir/ip_forward.saved" ]] || cat /proc/sys/net/ipv4/ip_forward >"$nodes_dir/ip_forward.saved"
  if ! iptables -w -n -L "$CHAIN" >/dev/null 2>&1; then
    iptables -w -N "$CHAIN"
    iptables -w -A "$CHAIN" -s "$POD_RANGE" -d "$POD_RANGE" -j ACCEPT
    # Everything else forwarded is dropped: before the nodes this machine forwarded nothing at all.
    iptables -w -A "$CHAIN" -j DROP
    iptables -w -I FORWARD 1 -j "$CHAIN"
  fi
  echo 1 >/proc/sys/net/ipv4/ip_forward
}

close_forwarding() {
  if iptables -w -n -L "$CHAIN" >/dev/null 2>&1; then
    while iptables -w -D FORWARD -j "$CHAIN" 2>/dev/null; do :; done
    iptables -w -F "$CHAIN" && iptables -w -X "$CHAIN"
  fi
  if [[ -f "$nodes_dir/ip_forward.saved" ]]; then
    cat "$nodes_dir/ip_forward.saved" >/proc/sys/net/ipv4/ip_forward
  fi
}

# --- the cluster's network services, one for the machine (the nodes share its network stack) ----------------
# The API server listens on 127.0.0.1 only; pods reach it as the `kubernetes` Service (10.96.0.1:443, a SAN of its
# certificate) through kube-proxy to 10.244.0.1:$APISERVER_PORT, where socat hands the connection to loopback.
# CoreDNS answers cluster.local from the API at 10.244.0.1:53, the `kube-dns` Service 10.96.0.10, and nothing else.
GATEWAY_IP=10.244.0.1
DNS_SERVICE_IP=10.96.0.10

write_identity() { # write_identity DIR NAME SUBJECT: a client certificate signed by the cluster CA, DIR/NAME.kubeconfig
  local d=$1 name=$2 subj=$3 pki="$dir/pki"
  mkdir -p "$d"
  if [[ ! -f "$d/$name.crt" ]]; then
    openssl genrsa -out "$d/$name.key" 2048 2>/dev/null
    openssl req -new -key "$d/$name.key" -subj "$subj" -out "$d/$name.csr" 2>/dev/null
    openssl x509 -req -in "$d/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
      -out "$d/$name.crt" -days 3650 2>/dev/null
  fi
  cat >"$d/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:$APISERVER_PORT", certificate-authority: "$pki/ca.crt"}
users:
- name: $name
  user: {client-certificate: "$d/$name.crt", client-key: "$d/$name.key"}
contexts:
- name: local
  context: {cluster: local, user: $name}
current-context: local
EOF
}

start_daemon() { # start_daemon NAME COMMAND...: setsid, pid file, log in $nodes_dir/logs
  local name=$1
  shift
  pid_alive "$name" && return 0
  mkdir -p "$dir/pids" "$nodes_dir/logs"
  setsid "$@" >>"$nodes_dir/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$dir/pids/$name.pid"
}

restart_controller_manager() { # it runs the EndpointSlice controller only while real nodes run (cluster.sh)
  CLUSTER_DIR=$dir bash "$root/hack/cluster.sh" stop kube-controller-manager
  CLUSTER_DIR=$dir bash "$root/hack/cluster.sh" start kube-controller-manager
}

start_services() {
  if [[ ! -f "$nodes_dir/endpointslices" ]]; then
    touch "$nodes_dir/endpointslices"
    restart_controller_manager
  fi
  start_daemon realnodes-apiserver-gateway socat \
    "TCP-LISTEN:$APISERVER_PORT,bind=$GATEWAY_IP,fork,reuseaddr" "TCP:127.0.0.1:$APISERVER_PORT"
  # The default bootstrap policy binds system:node-proxier to the user system:kube-proxy.
  write_identity "$nodes_dir" kube-proxy "/CN=system:kube-proxy"
  cat >"$nodes_dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$nodes_dir/kube-proxy.kubeconfig"}
mode: iptables
clusterCIDR: $POD_RANGE
hostnameOverride: $(name_of 0)
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:20380
metricsBindAddress: 127.0.0.1:20381
# Leave the machine's sysctls alone: no conntrack table resize, no route_localnet for localhost NodePorts.
conntrack: {maxPerCore: 0}
iptables: {localhostNodePorts: false}
EOF
  start_daemon realnodes-kube-proxy "$bin/kube-proxy" --config="$nodes_dir/kube-proxy.yaml" --v=1
  cat >"$nodes_dir/Corefile" <<EOF
cluster.local:53 in-addr.arpa:53 {
  bind $GATEWAY_IP
  errors
  kubernetes cluster.local in-addr.arpa {
    kubeconfig $dir/kubeconfig
    pods insecure
  }
  cache 5
}
.:53 {
  bind $GATEWAY_IP
  # Nothing is forwarded off the machine: any other name does not exist here.
  template ANY ANY {
    rcode NXDOMAIN
  }
}
EOF
  start_daemon realnodes-coredns "$bin/coredns" -conf "$nodes_dir/Corefile"
  kubectl_ apply -f - >/dev/null <<EOF
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kubernetes-realnodes
  namespace: default
  labels: {kubernetes.io/service-name: kubernetes, endpointslice.kubernetes.io/managed-by: ddpjob.dev-realnode}
addressType: IPv4
endpoints: [{addresses: ["$GATEWAY_IP"], conditions: {ready: true}}]
ports: [{name: https, port: $APISERVER_PORT, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS}
spec:
  clusterIP: $DNS_SERVICE_IP
  ports: [{name: dns, port: 53, protocol: UDP}, {name: dns-tcp, port: 53, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-realnodes
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns, endpointslice.kubernetes.io/managed-by: ddpjob.dev-realnode}
addressType: IPv4
endpoints: [{addresses: ["$GATEWAY_IP"], conditions: {ready: true}}]
ports: [{name: dns, port: 53, protocol: UDP}, {name: dns-tcp, port: 53, protocol: TCP}]
EOF
}

dns_answers() { # CoreDNS resolves the `kubernetes` Service
  python3 - "$GATEWAY_IP" <<'PY'
import socket, struct, sys
q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
for label in "kubernetes.default.svc.cluster.local".split("."):
    q += bytes([len(label)]) + label.encode()
q += b"\x00\x00\x01\x00\x01"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1)
s.sendto(q, (sys.argv[1], 53))
reply = s.recv(512)
sys.exit(0 if struct.unpack(">H", reply[6:8])[0] >= 1 else 1)
PY
}

remove_kubelet_chains() { # the kubelets' own iptables chains (KUBE-FIREWALL, its canaries), in both families
  local cmd table rule chain
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null || continue
    for table in filter nat mangle; do
      "$cmd"-save -t "$table" 2>/dev/null | grep -E '^-A (INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING) .*-j KUBE-' |
        while read -r rule; do
          # shellcheck disable=SC2086 # the rule's words are iptables arguments
          "$cmd" -w -t "$table" -D ${rule#-A } 2>/dev/null || true
        done || true # grep finds none
      for chain in $("$cmd"-save -t "$table" 2>/dev/null | grep -oE '^:KUBE-[A-Z0-9-]+' | tr -d ':'); do
        "$cmd" -w -t "$table" -F "$chain" 2>/dev/null || true
      done
      for chain in $("$cmd"-save -t "$table" 2>/dev/null | grep -oE '^:KUBE-[A-Z0-9-]+' | tr -d ':'); do
        "$cmd" -w -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  done
}

stop_services() {
  local name
  for name in realnodes-coredns realnodes-kube-proxy realnodes-apiserver-gateway; do stop_pid "$name"; done
  pkill -KILL -f "socat TCP-LISTEN:$APISERVER_PORT,bind=$GATEWAY_IP" 2>/dev/null || true
  # kube-proxy's own cleanup removes every KUBE-* chain and rule it wrote.
  if [[ -x "$bin/kube-proxy" ]]; then "$bin/kube-proxy" --cleanup >/dev/null 2>&1 || true; fi
  remove_kubelet_chains
  kubectl_ -n default delete endpointslice kubernetes-realnodes --ignore-not-found >/dev/null 2>&1 || true
  kubectl_ -n kube-system delete service kube-dns --ignore-not-found >/dev/null 2>&1 || true
  kubectl_ -n kube-system delete endpointslice kube-dns-realnodes --ignore-not-found >/dev/null 2>&1 || true
  if [[ -f "$nodes_dir/endpointslices" ]]; then
    rm -f "$nodes_dir/endpointslices"
    restart_controller_manager
  fi
}

# --- commands -----------------------------------------------------------------------------------------------
up() {
  local n=${1:-2} i t0=$SECONDS
  ((n > 0)) || return 0
  [[ $(id -u) == 0 ]] || { log "real nodes need root (containerd, mounts, network namespaces)"; exit 1; }
  for t in kubelet containerd containerd-shim-runc-v2 ctr crictl cni-bridge cni-host-local cni-loopback; do
    [[ -x "$bin/$t" ]] || { log "missing $bin/$t: run 'hack/build-tools.sh node' (make node-tools)"; exit 1; }
  done
  command -v buildah >/dev/null && [[ -x $RUNC ]] || { log "missing runc or buildah: run 'make node-tools'"; exit 1; }
  [[ -f "$dir/pki/ca.key" ]] || { log "no local cluster in $dir: run 'make cluster-up' first"; exit 1; }
  open_forwarding
  for ((i = 0; i < n; i++)); do
    write_node_pki "$i"
    write_node_config "$i"
    # containerd-shim-runc-v2 is found on containerd's PATH.
    PATH="$bin:$PATH" start_node "$i"
  done
  start_services
  for ((i = 0; i < n; i++)); do wait_for 120 "$(name_of "$i") Ready" node_ready "$i"; done
  wait_for 60 "CoreDNS answering" dns_answers
  log "$n real node(s) Ready in $((SECONDS - t0))s"
}

freezer() { # freezer I FROZEN|THAWED: node I's pods (every process under its cgroup root) stop or go on
  local f="/sys/fs/cgroup/freezer/ddpjob-realnode-$1/freezer.state"
  [[ -f $f ]] || { log "node $1 has no freezer cgroup ($f)"; return 1; }
  echo "$2" >"$f"
}

shims_gone() { ! pgrep -f "$1" >/dev/null; }

unbound_shim_sockets() { # sockets in containerd's shim directory that no process listens on: a killed shim's
  local s
  [[ -d /run/containerd/s ]] || return 0
  for s in /run/containerd/s/*; do
    [[ -S $s ]] && ! awk -v path="$s" '$8 == path {found = 1} END {exit !found}' /proc/net/unix && echo "$s"
  done
  true
}

remove_node() { # everything node I made, whether or not its daemons still run
  local i=$1 name d
  name=$(name_of "$i") d=$(node_dir "$i")
  # A frozen process takes no signal until thawed: nothing below could stop it.
  freezer "$i" THAWED 2>/dev/null || true
  stop_pid "$name-kubelet"
  local pids shim_pattern="containerd-shim-runc-v2 .*-address $run_dir/node-$i/"
  if pid_alive "$name-containerd"; then
    # Pod sandboxes first: their network namespaces, CNI addresses and mounts go with them, and their shims exit
    # (removing their sockets) in a moment.
    crictl_ "$i" rmp --all --force >/dev/null 2>&1 || true
    wait_for 10 "$name's shims to exit" shims_gone "$shim_pattern" || true
  fi
  stop_pid "$name-containerd"
  # Shims outlive containerd by design: those left are killed with the containers under them (down() removes the
  # sockets they leave).
  pids=$(pgrep -f "$shim_pattern" || true)
  for pid in $pids; do pkill -KILL -P "$pid" 2>/dev/null || true; kill -KILL "$pid" 2>/dev/null || true; done
  # Mounts under the node's directories (overlay rootfs, shm, volumes, netns bind mounts), deepest first.
  local m
  for m in $(awk '{print $2}' /proc/self/mounts | grep -E "^($d|$run_dir/node-$i|$store_dir/node-$i)(/|$)" | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  ip link del "ddpjbr$i" 2>/dev/null || true
  # cgroups: every controller's /ddpjob-realnode-I, deepest first, once its processes are gone.
  local cg
  for cg in /sys/fs/cgroup/*/ddpjob-realnode-"$i"; do
    [[ -d $cg ]] || continue
    find "$cg" -depth -type d -exec sh -c 'for p in $(cat "$1/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done; rmdir "$1" 2>/dev/null' _ {} \; || true
  done
  rm -rf "$d" "$run_dir/node-$i"
  kubectl_ delete node "$name" --wait=false >/dev/null 2>&1 || true
}

down() {
  local i
  if [[ -d "$nodes_dir" ]]; then
    for d in "$nodes_dir"/node-*; do [[ -d $d ]] && remove_node "${d##*/node-}"; done
    stop_services
  fi
  # Network namespaces CNI made for this cluster's pods that a crashed containerd left behind.
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^cni-' || true); do
    if ip netns exec "$ns" ip -4 -o addr 2>/dev/null | grep -q ' 10\.244\.'; then ip netns del "$ns" || true; fi
  done
  close_forwarding
  rm -rf "$nodes_dir" "$run_dir"
  # The shims' socket directory is containerd's own (/run/containerd/s, whatever the state dir). A shim killed
  # above, or by a crash before this `down`, left its socket with no one listening on it: removed, as its exit
  # would have. A socket a live shim listens on (another containerd's) is kept.
  for s in $(unbound_shim_sockets); do rm -f "$s"; done
  [[ -d /run/containerd ]] && find /run/containerd -depth -type d -empty -delete 2>/dev/null || true
  log "real nodes stopped and their state removed"
}

left() { # what of the real nodes is still on this machine: empty after `down`
  pgrep -af "($bin/kubelet|$bin/containerd|$bin/kube-proxy|$bin/coredns|containerd-shim-runc-v2 .*-address $run_dir|socat TCP-LISTEN:$APISERVER_PORT,bind=$GATEWAY_IP)" || true
  iptables-save 2>/dev/null | grep -E '^:KUBE-' || true
  ip6tables-save 2>/dev/null | grep -E '^:KUBE-' || true
  awk '{print $2}' /proc/self/mounts | grep -E "^($nodes_dir|$run_dir|$store_dir)(/|$)" || true
  ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | grep -E '^ddpjbr[0-9]+' || true
  ls -d /sys/fs/cgroup/*/ddpjob-realnode-* 2>/dev/null || true
  iptables -w -n -L "$CHAIN" >/dev/null 2>&1 && echo "iptables chain $CHAIN" || true
  unbound_shim_sockets
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^cni-' || true); do
    ip netns exec "$ns" ip -4 -o addr 2>/dev/null | grep -q ' 10\.244\.' && echo "netns $ns"
  done
  true
}

status() {
  local d i name up=0
  for d in "$nodes_dir"/node-*; do
    [[ -d $d ]] || continue
    i=${d##*/node-} name=$(name_of "$i")
    if pid_alive "$name-kubelet" && pid_alive "$name-containerd"; then echo "$name: running"; up=$((up + 1))
    else echo "$name: stopped"; fi
  done
  echo "real nodes running: $up"
}

case ${1:-} in
  up) up "${2:-2}" ;;
  down) down ;;
  status) status ;;
  left) left ;;
  stop) stop_pid "$(name_of "$2")-kubelet" ;;
  start) start_kubelet "$2" ;;
  freeze) freezer "$2" FROZEN ;;
  thaw) freezer "$2" THAWED ;;
  crictl) shift; i=$1; shift; crictl_ "$i" "$@" ;;
  *) echo "usage: $0 up N|down|status|left|stop I|start I|freeze I|thaw I|crictl I ARGS..." >&2; exit 2 ;;
esac
