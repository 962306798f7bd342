#!/usr/bin/env bash
# Idempotent set-up: the project venv with exactly the Python lock (hack/requirements.lock, hashes checked) and
# the three local packages (editable, no deps of their own), then the Go-built tools.
# A second run only checks stamps, so it takes seconds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
PY=${PYTHON:-python3.11}
venv="$root/.venv"
stamp="$venv/.deps.stamp"
lock=hack/requirements.lock
# The pyprojects count too: they hold the editable packages' entry points.
want=$(cat "$lock" operator/pyproject.toml trainer_image/pyproject.toml hack/localnode/pyproject.toml | sha256sum | cut -c1-16)

if [[ ! -x "$venv/bin/python" ]]; then
  echo ">> creating $venv"
  "$PY" -m venv "$venv"
fi
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo ">> installing $lock (torch is large on a fresh machine; pip's cache makes later runs fast)"
  # Every package pinned with its hashes, pip and setuptools included: pip refuses anything unlisted or altered.
  "$venv/bin/pip" install -q --require-hashes -r "$lock"
  # The local packages: their deps are in the lock; setuptools (locked above) builds them in place. The local node
  # (hack/localnode) is dev tooling, kept out of the operator's wheel and image.
  "$venv/bin/pip" install -q --no-deps --no-build-isolation -e operator -e trainer_image -e hack/localnode
  echo "$want" >"$stamp"
fi

if [[ "${SKIP_TOOLS:-0}" != 1 ]]; then
  bash "$root/hack/build-tools.sh"
  # promtool and prometheus (Debian's package) for the chart's rule tests and the real-scrape test.
  bash "$root/hack/install-prometheus.sh"
fi
