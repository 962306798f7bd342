#!/usr/bin/env bash
# Installs Debian's prometheus package (prometheus + promtool), which the chart tests run for real:
# promtool checks and unit-tests the alert rules, and a real Prometheus scrapes the operator and a trainer.
# Idempotent: does nothing when both binaries are already on PATH.
set -euo pipefail
if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
  exit 0
fi
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
# The tests start their own Prometheus on a free loopback port; the package's system service is not used.
install() { $sudo apt-get install -y --no-install-recommends prometheus; }
echo ">> installing Debian's prometheus package (promtool, prometheus)"
# A fresh machine may have no package lists yet; update only when the plain install fails.
if ! install; then
  $sudo apt-get update
  install
fi
command -v promtool >/dev/null && command -v prometheus >/dev/null
