#!/usr/bin/env bash
# Images for the real nodes, built with buildah and no image registry (docs/real-nodes.md):
#
#   hack/images.sh base        the Debian bookworm + Python base made here by mmdebstrap from Debian's packages
#   hack/images.sh operator    the operator image from operator/Dockerfile, on that base (BASE_IMAGE build arg)
#   hack/images.sh trainer     the trainer image from trainer_image/Dockerfile, on that base plus the locked torch
#   hack/images.sh load        import every built image into each running real node's containerd
#   hack/images.sh list        the built images: name, archive, size
#
# Every image is an OCI archive in $DDPJOB_IMAGES_DIR (default ~/.cache/ddpjob-operator/images), outside the
# checkout like the Go tools, named after a hash of its inputs: it is rebuilt only when they change.
set -euo pipefail
# A failure inside $(...) fails it: a commit that ran out of disk must not leave a cut-short archive named as built.
shopt -s inherit_errexit
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/.cache/bin"
dir=${CLUSTER_DIR:-$root/.local-cluster}
images_dir=${DDPJOB_IMAGES_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ddpjob-operator/images}
run_dir=${DDPJOB_REALNODE_RUN:-/run/ddpjob-realnodes}
# shellcheck source=hack/lib.sh
source "$root/hack/lib.sh"
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# What the base holds: Python as the python:3.11-slim image has it (python, pip that installs system-wide, its C
# headers, which Triton's launcher builds against), the user tools the Dockerfiles call (groupadd, useradd), and CA
# certificates.
BASE_PACKAGES=python3,python3-pip,python3-dev,python-is-python3,passwd,ca-certificates
BASE_NAME=localhost/ddpjob/debian-python:bookworm
mkdir -p "$images_dir"


recipe_hash() { (declare -f base; echo "$BASE_PACKAGES") | sha256sum | cut -c1-16; } # the base's recipe only

prune() { # prune SHORT KEEP: older archives of the same image go
  local old
  for old in "$images_dir/$1"-*.oci.tar; do [[ -f $old && $old != "$2" ]] && rm -f "$old" "${old%.oci.tar}.index.json"; done
  true
}

# An archive's path for NAME with the hash of its inputs; the current one is linked as NAME.oci.tar.
archive() { echo "$images_dir/$1-$2.oci.tar"; }

base() {
  local want out
  want=$(recipe_hash)
  out=$(archive debian-python "$want")
  if [[ -f "$out" ]]; then ln -sfn "$out" "$images_dir/debian-python.oci.tar"; echo "$out"; return 0; fi
  local t0=$SECONDS work c
  work=$(mktemp -d)
  log "making the Debian bookworm + Python base with mmdebstrap ($BASE_PACKAGES)"
  mmdebstrap --quiet --variant=minbase --include="$BASE_PACKAGES" \
    --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    bookworm "$work/rootfs.tar" "$DEBIAN_MIRROR" >&2
  c=$(buildah from scratch)
  buildah add --quiet "$c" "$work/rootfs.tar" / >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
    --cmd '["python3"]' "$c"
  buildah commit --rm --quiet "$c" "oci-archive:$out.tmp:$BASE_NAME" >/dev/null \
    || { rm -f "$out.tmp"; buildah rm "$c" >/dev/null 2>&1; return 1; }
  mv "$out.tmp" "$out"
  ln -sfn "$out" "$images_dir/debian-python.oci.tar"
  prune debian-python "$out"
  rm -rf "$work"
  log "base built in $((SECONDS - t0))s: $(du -h "$out" | cut -f1) ($out)"
  echo "$out"
}

# The inputs of a Dockerfile build: the content of the files under its context that git does not ignore (edits not
# yet committed included), and the base archive (named by its own inputs' hash).
context_hash() { # context_hash DIR BASE_ARCHIVE
  (cd "$root" && git ls-files -z --cached --others --exclude-standard -- "$1" | sort -z |
    xargs -0 sha256sum 2>/dev/null; readlink -f "$2") | sha256sum | cut -c1-16
}

dockerfile_image() { # dockerfile_image SHORT CONTEXT_DIR REF [BASE_ARCHIVE [buildah push flags]]
  local short=$1 context=$2 ref=$3 base_archive=${4:-} want out
  [[ -n $base_archive ]] || base_archive=$(base)
  want=$(context_hash "$context" "$base_archive")
  out=$(archive "$short" "$want")
  if [[ -f "$out" ]]; then ln -sfn "$out" "$images_dir/$short.oci.tar"; echo "$out"; return 0; fi
  local t0=$SECONDS
  log "building $ref from $context/Dockerfile with buildah (base: $(basename "$base_archive"))"
  # The build's RUN steps use the machine's network for pip (PyPI), and its CA bundle, mounted for the build only
  # (it trusts this machine's egress proxy: nothing of it stays in the image). FROM needs no registry.
  buildah build --quiet --layers=false --network host --build-arg "BASE_IMAGE=oci-archive:$base_archive" \
    --volume /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
    --tag "$ref" --file "$root/$context/Dockerfile" "$root/$context" >&2
  buildah push --quiet "${@:5}" "$ref" "oci-archive:$out.tmp:$ref" >&2
  buildah rmi "$ref" >/dev/null 2>&1 || true
  mv "$out.tmp" "$out"
  ln -sfn "$out" "$images_dir/$short.oci.tar"
  prune "$short" "$out"
  log "$ref built in $((SECONDS - t0))s: $(du -h "$out" | cut -f1)"
  echo "$out"
}

# The stand-in for the trainer's GPU base (pytorch/pytorch:<torch>-cuda<X.Y>-cudnn<N>-runtime): the Python base with
# torch and what it pulls in (its CUDA libraries too: the PyPI wheel loads them even on a CPU) at the versions and
# hashes of hack/requirements.lock, so the trainer image's pip keeps that torch as it keeps the real base's.
torch_requirements() {
  "$root/.venv/bin/python" - "$root/hack/requirements.lock" <<'PY'
import importlib.metadata as md, re, sys
from packaging.requirements import Requirement
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
seen, done, todo = set(), set(), [("torch", "")]
while todo:  # (name, extra): an extra such as cuda-toolkit[cudart] brings requirements of its own
    name, extra = todo.pop()
    if (norm(name), extra) in done:
        continue
    done.add((norm(name), extra))
    seen.add(norm(name))
    for line in md.requires(name) or []:
        req = Requirement(line)
        if not req.marker or req.marker.evaluate({"extra": extra}):
            todo += [(req.name, "")] + [(req.name, e) for e in req.extras]
entries = re.split(r"\n(?=[A-Za-z0-9])", open(sys.argv[1]).read())
for entry in entries:
    head = entry.split("==", 1)[0].strip()
    if "==" in entry and norm(head) in seen:
        print(entry.rstrip())
PY
}

torch_base() {
  local want out requirements
  requirements=$(torch_requirements)
  want=$( (echo "$requirements"; readlink -f "$(base)") | sha256sum | cut -c1-16)
  out=$(archive torch-base "$want")
  if [[ -f "$out" ]]; then echo "$out"; return 0; fi
  local t0=$SECONDS c version
  version=$(echo "$requirements" | grep -oE '^torch==[^ ]+' | cut -d= -f3)
  log "making the torch base: torch $version and its $(echo "$requirements" | grep -c '==') locked requirements"
  echo "$requirements" >"$images_dir/torch-requirements.txt"
  c=$(buildah from "oci-archive:$(base)")
  buildah copy --quiet "$c" "$images_dir/torch-requirements.txt" /tmp/torch-requirements.txt >/dev/null
  buildah run --network host --volume /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
    "$c" -- sh -c 'pip install --quiet --no-cache-dir --require-hashes --no-deps -r /tmp/torch-requirements.txt \
      && rm /tmp/torch-requirements.txt' >&2
  # Uncompressed: gzip of the CUDA libraries costs minutes on two cores and saves nothing on one machine.
  buildah commit --rm --quiet --disable-compression "$c" "oci-archive:$out.tmp:localhost/ddpjob/torch-base:$version" \
    >/dev/null || { rm -f "$out.tmp"; buildah rm "$c" >/dev/null 2>&1; return 1; }
  mv "$out.tmp" "$out"
  prune torch-base "$out"
  log "torch base built in $((SECONDS - t0))s: $(du -h "$out" | cut -f1)"
  echo "$out"
}

trainer_ref() {
  local version
  version=$(grep -oE '^version *= *"[^"]+' "$root/trainer_image/pyproject.toml" | sed -E 's/.*"//')
  echo "localhost/ddpjob/trainer:$version"
}

operator_ref() {
  local version
  version=$(grep -oE '^appVersion: *"?[^"]+' "$root/charts/ddpjob-operator/Chart.yaml" | sed -E 's/appVersion: *"?//')
  echo "localhost/ddpjob/operator:$version"
}

# "REF DIGEST" of an image archive, from its index.json. buildah writes that file last, so reading it scans the whole
# archive (3 GB for the trainer): it is read once and kept beside the archive.
ref_and_digest() {
  local archive index
  archive=$(readlink -f "$1")
  index="${archive%.oci.tar}.index.json"
  [[ -f $index ]] || tar -xOf "$archive" index.json >"$index"
  python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["manifests"][0]
print(m["annotations"]["org.opencontainers.image.ref.name"], m["digest"])' "$index"
}

load() { # import every current image (the NAME.oci.tar links) into each running real node's containerd
  local sock i image ref digest have
  for sock in "$run_dir"/node-*/containerd.sock; do
    [[ -S $sock ]] || continue
    i=${sock%/containerd.sock}
    i=${i##*/node-}
    have=$("$bin/ctr" --address "$sock" -n k8s.io images ls 2>/dev/null | awk '{print $1, $3}')
    for image in "$images_dir"/*.oci.tar; do
      [[ -L $image ]] || continue
      read -r ref digest < <(ref_and_digest "$image")
      grep -qxF "$ref $digest" <<<"$have" && continue
      local t0=$SECONDS
      "$bin/ctr" --address "$sock" -n k8s.io images import "$(readlink -f "$image")" >/dev/null
      log "loaded $ref into realnode-$i in $((SECONDS - t0))s"
    done
    prune_node "$sock" "$i"
  done
}

prune_node() { # prune_node SOCK I: drop what a moved tag left behind in node I's containerd
  # A tag that moves to a new image leaves the old one under the CRI's own image-ID name (sha256:<config>), which
  # keeps its layers and snapshots (GBs for the trainer) for ever. An image no tag names is removed here; what a
  # running container still uses stays (containerd keeps the snapshots it holds) and goes with the next prune.
  local sock=$1 i=$2 listing named ref digest
  listing=$("$bin/ctr" --address "$sock" -n k8s.io images ls 2>/dev/null | awk 'NR > 1 {print $1, $3}')
  named=$(awk '$1 !~ /^sha256:/ {print $2}' <<<"$listing")
  while read -r ref digest; do
    [[ -n $ref ]] || continue
    grep -qxF "$digest" <<<"$named" && continue
    "$bin/ctr" --address "$sock" -n k8s.io images rm "$ref" >/dev/null
    log "removed from realnode-$i an image no tag names any more ($ref)"
  done < <(awk '$1 ~ /^sha256:/' <<<"$listing")
}

list() {
  local image
  for image in "$images_dir"/*.oci.tar; do
    [[ -L $image ]] || continue
    printf '%-40s %8s  %s\n' "$(basename "$image" .oci.tar)" "$(du -hL "$image" | cut -f1)" "$(readlink -f "$image")"
  done
}

case ${1:-} in
  base) base >/dev/null ;;
  operator) dockerfile_image operator operator "$(operator_ref)" >/dev/null ;;
  operator-ref) operator_ref ;;
  trainer)
    torch_base_archive=$(torch_base)
    dockerfile_image trainer trainer_image "$(trainer_ref)" "$torch_base_archive" --disable-compression >/dev/null
    ;;
  trainer-ref) trainer_ref ;;
  load) load ;;
  list) list ;;
  *) echo "usage: $0 base|operator|operator-ref|trainer|trainer-ref|load|list" >&2; exit 2 ;;
esac
