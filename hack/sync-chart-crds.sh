#!/usr/bin/env bash
# Copies the single-source CRDs (crds/) into the Helm chart's crds/. tests/chart/test_crds_in_sync.py fails
# when the two drift; run this to fix it. The chart also carries kopf's peering CRDs (for ha.enabled), which
# have no top-level source and are left alone.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/charts/ddpjob-operator/crds"
mkdir -p "$dest"
for f in "$root"/crds/*.yaml; do
  cp "$f" "$dest/$(basename "$f")"
  echo ">> synced $(basename "$f")"
done
