#!/usr/bin/env bash
# Builds the pinned Kubernetes tools from the Go module proxy into .cache/bin.
# Each tool is rebuilt only when its module pins (go.mod/go.sum/*.go under hack/tools/<tool>) change.
#   hack/build-tools.sh          the Kubernetes tools, etcd, kwok and helm
#   hack/build-tools.sh kueue    Kueue's manager only (about 10 minutes cold): wanted by Kueue's tests and
#                                `make kueue-up`, never by `make demo`
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/.cache/bin"
mkdir -p "$bin"
shared_cache=${DDPJOB_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ddpjob-operator/bin}
export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0

build() { # build <tool-dir> <output-name> <package> [extra ldflags] [build tags]
  local dir="$root/hack/tools/$1" out="$2" pkg="$3" ldflags="-s -w ${4:-}" tags="${5:-}"
  local stamp="$bin/.$out.stamp"
  local want
  want=$( (cat "$dir"/go.mod "$dir"/go.sum "$dir"/*.go 2>/dev/null; echo "$ldflags${tags:+ tags=$tags}") | sha256sum | cut -c1-16)-$(go env GOVERSION)
  if [[ -x "$bin/$out" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return 0
  fi
  # A per-user cache outside the checkout lets a fresh clone (CI) reuse binaries built from the same pins.
  local shared="$shared_cache/$out-$want"
  if [[ -x "$shared" ]]; then
    cp "$shared" "$bin/$out"
    echo "$want" >"$stamp"
    return 0
  fi
  echo ">> building $out from $pkg"
  local t0=$SECONDS
  (cd "$dir" && go build -trimpath -tags="$tags" -ldflags="$ldflags" -o "$bin/$out" "$pkg")
  echo "$want" >"$stamp"
  mkdir -p "$shared_cache" && cp "$bin/$out" "$shared.tmp" && mv "$shared.tmp" "$shared"
  echo ">> $out built in $((SECONDS - t0))s"
}

if [[ ${1:-} == kueue ]]; then
  # sigs.k8s.io/scheduler-library v0.1.0-alpha1 is served by the module proxy but missing from the checksum
  # database (404): its hash is pinned in hack/tools/kueue/go.sum instead.
  export GONOSUMDB=sigs.k8s.io/scheduler-library
  build kueue kueue sigs.k8s.io/kueue/cmd/kueue
  exit 0
fi

if [[ ${1:-} == node ]]; then
  kube_version=$(grep -oE 'k8s.io/kubernetes v[0-9.]+' "$root/hack/tools/kubelet/go.mod" | head -1 | cut -d' ' -f2)
  kv=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kv+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(echo "$kube_version" | cut -d. -f2)"
    kv+=" -X $pkg.gitTreeState=clean"
  done
  build kubelet kubelet k8s.io/kubernetes/cmd/kubelet "$kv"
  build kubelet kube-proxy k8s.io/kubernetes/cmd/kube-proxy "$kv"
  ctr_version=$(grep -oE 'containerd/containerd/v2 v[0-9.]+' "$root/hack/tools/containerd/go.mod" | head -1 | cut -d' ' -f2)
  cv="-X github.com/containerd/containerd/v2/version.Version=$ctr_version"
  # No cgo: the btrfs snapshotter (cgo) is left out; the nodes use overlayfs.
  build containerd containerd github.com/containerd/containerd/v2/cmd/containerd "$cv" no_btrfs
  build containerd containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 "$cv"
  build containerd ctr github.com/containerd/containerd/v2/cmd/ctr "$cv"
  for plugin in main/bridge ipam/host-local main/loopback; do
    build cni "cni-${plugin#*/}" "github.com/containernetworking/plugins/plugins/$plugin"
  done
  build crictl crictl sigs.k8s.io/cri-tools/cmd/crictl
  build coredns coredns github.com/coredns/coredns
  exit 0
fi

build etcd etcd .
# Stamp the release into the binaries, as Kubernetes' own build does; otherwise they report v0.0.0 and clients
# such as helm misjudge the server's version.
kube_version=$(grep -oE 'k8s.io/kubernetes v[0-9.]+' "$root/hack/tools/kube/go.mod" | head -1 | cut -d' ' -f2)
kube_minor=$(echo "$kube_version" | cut -d. -f2)
kv=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kv+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kube_minor -X $pkg.gitTreeState=clean"
done
build kube kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kv"
build kube kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$kv"
build kube kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$kv"
build kube kubectl k8s.io/kubernetes/cmd/kubectl "$kv"
build kwok kwok sigs.k8s.io/kwok/cmd/kwok
# As helm's own Makefile does: default capabilities (helm template, helm lint) follow the client-go it is built
# with, and `helm version` reports the pinned release.
helm_version=$(grep -oE 'helm.sh/helm/v3 v[0-9.]+' "$root/hack/tools/helm/go.mod" | head -1 | cut -d' ' -f2)
helm_k8s_minor=$(grep -oE 'k8s.io/client-go v0\.[0-9]+' "$root/hack/tools/helm/go.mod" | head -1 | sed -E 's/.*v0\.//')
hv="-X helm.sh/helm/v3/internal/version.version=$helm_version -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  hv+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$helm_k8s_minor"
done
build helm helm helm.sh/helm/v3/cmd/helm "$hv"
