#!/usr/bin/env bash
# Idempotent set-up: the project venv with both packages (editable) and the test deps, then the Go-built tools.
# A second run only checks stamps, so it takes seconds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
PY=${PYTHON:-python3.11}
venv="$root/.venv"
stamp="$venv/.deps.stamp"
want=$(cat operator/pyproject.toml trainer_image/pyproject.toml hack/requirements-dev.txt | sha256sum | cut -c1-16)

if [[ ! -x "$venv/bin/python" ]]; then
  echo ">> creating $venv"
  "$PY" -m venv "$venv"
fi
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo ">> installing Python deps (torch is large on a fresh machine; pip's cache makes later runs fast)"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q -e operator -e trainer_image -r hack/requirements-dev.txt
  echo "$want" >"$stamp"
fi

if [[ "${SKIP_TOOLS:-0}" != 1 ]]; then
  bash "$root/hack/build-tools.sh"
  # promtool and prometheus (Debian's package) for the chart's rule tests and the real-scrape test.
  bash "$root/hack/install-prometheus.sh"
fi
