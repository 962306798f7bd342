#!/usr/bin/env bash
# Installs what the real nodes take from Debian's packages rather than the Go module proxy: runc (containerd's
# runtime), buildah (builds the images from our Dockerfiles with no Docker engine), mmdebstrap (the Debian base
# the images stand on), iptables and iproute2 (the nodes' bridges and forwarding rules), socat (the API server's
# address inside the pod network).
# Idempotent: does nothing when every command is already on PATH.
set -euo pipefail
want=(runc buildah mmdebstrap iptables ip socat)
missing=0
for c in "${want[@]}"; do command -v "$c" >/dev/null 2>&1 || missing=1; done
((missing)) || exit 0
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
install() { $sudo apt-get install -y --no-install-recommends runc buildah mmdebstrap iptables iproute2 socat; }
echo ">> installing Debian's runc, buildah, mmdebstrap, iptables, iproute2 (the real nodes)"
if ! install; then
  $sudo apt-get update
  install
fi
for c in "${want[@]}"; do command -v "$c" >/dev/null; done
