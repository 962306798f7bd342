# ddpjob-operator — run `make help` for the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help
ROOT := $(abspath .)
VENV := $(ROOT)/.venv
PY := $(VENV)/bin/python
export PATH := $(ROOT)/.cache/bin:$(VENV)/bin:$(PATH)
KUBECONFIG_LOCAL := $(ROOT)/.local-cluster/kubeconfig
NODES ?= 4
GPUS_PER_NODE ?= 8
PYTEST_ARGS ?=
UPGRADE ?= 0
UPGRADE_PACKAGE ?=
# What `make lint` covers; tests/ is outside the gate.
LINT_PATHS := operator trainer_image bench hack/localnode $(wildcard hack/*.py)

.PHONY: help setup venv lock tools node-tools images kueue-tools kueue-up kueue-down cluster-up cluster-down cluster-status test test-unit test-integration test-trainer test-e2e test-realnode test-chart test-chaos demo operator sim bench lint

help: ## Show this help
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}'

setup: ## Create the venv, install Python deps and build the Go tools (idempotent)
	@bash hack/setup.sh

venv: ## Create the venv and install the Python deps only, no Go tools (idempotent)
	@SKIP_TOOLS=1 bash hack/setup.sh

lock: venv ## Regenerate hack/requirements.lock (hashed) and trainer_image/constraints.txt; UPGRADE=1 moves every pin
	@UPGRADE=$(UPGRADE) UPGRADE_PACKAGE=$(UPGRADE_PACKAGE) bash hack/lock.sh

tools: ## Build the pinned kube-apiserver, controller-manager, scheduler, kubectl, etcd, kwok, helm into .cache/bin
	@bash hack/build-tools.sh

node-tools: setup ## Build the real nodes' kubelet, kube-proxy, containerd 2.x, CNI plugins and crictl; install runc, buildah (Debian)
	@bash hack/build-tools.sh node
	@bash hack/install-node-packages.sh

images: node-tools ## Build the operator and trainer images from their Dockerfiles with buildah, no registry (hack/images.sh)
	@bash hack/images.sh operator
	@bash hack/images.sh trainer
	@bash hack/images.sh list

cluster-up: setup ## Start the local control plane with kwok GPU nodes (NODES=4 GPUS_PER_NODE=8); LOCAL_NODES=N adds N local node agents, KUBELET_NODES=N real kubelets
	@NODES=$(NODES) GPUS_PER_NODE=$(GPUS_PER_NODE) bash hack/cluster.sh up
	@if [ -n "$(LOCAL_NODES)" ]; then LOCAL_NODES=$(LOCAL_NODES) $(PY) -m ddpjob_localnode start --all; fi
	@if [ -n "$(KUBELET_NODES)" ]; then $(MAKE) --no-print-directory node-tools && bash hack/realnode.sh up $(KUBELET_NODES); fi

kueue-tools: setup ## Build Kueue's pinned manager into .cache/bin (hack/tools/kueue; about 10 minutes the first time)
	@bash hack/build-tools.sh kueue

kueue-up: kueue-tools ## Start Kueue on the running local cluster: its CRDs, webhooks and manager (docs/kueue.md)
	@bash hack/kueue.sh up

kueue-down: ## Stop the local Kueue manager
	@bash hack/kueue.sh down

cluster-down: ## Stop exactly the processes cluster-up started and remove their state
	@bash hack/cluster.sh down

cluster-status: ## Show whether the local cluster is up
	@bash hack/cluster.sh status

operator: setup ## Run the operator in the foreground against $$KUBECONFIG (or the local cluster)
	@bash hack/run-operator.sh

lint: venv ## Lint and type-check: ruff check, ruff format --check, mypy (settings in pyproject.toml)
	@ruff check $(LINT_PATHS)
	@ruff format --check $(LINT_PATHS)
	@mypy

# The images are built before pytest, alone on the machine: built by the real-node suite's fixture they took 853 s
# under the other lanes' load (a changed trainer rebuilds its image), slowed every lane and hit pytest's timeout.
test: setup kueue-tools node-tools lint images ## Lint, build the images, then run the whole suite (unit, trainer, integration, e2e, realnode, chart, chaos)
	@$(PY) -m pytest -n 3 --dist loadscope tests bench/tests $(PYTEST_ARGS)

test-unit: setup ## Run only the pure unit tests (no cluster)
	@$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-integration: setup kueue-tools ## Run the operator tests against the local control plane
	@$(PY) -m pytest tests/integration $(PYTEST_ARGS)

test-trainer: setup ## Run the torchrun trainer tests on CPU (gloo)
	@$(PY) -m pytest tests/trainer $(PYTEST_ARGS)

test-e2e: setup ## Run whole jobs on the local cluster with the local node
	@$(PY) -m pytest tests/e2e $(PYTEST_ARGS)

test-realnode: setup node-tools ## Run the suites on two real nodes (kubelet + containerd 2.x; root; docs/real-nodes.md)
	@$(PY) -m pytest tests/realnode $(PYTEST_ARGS)

test-chart: setup ## Run the Helm chart tests
	@$(PY) -m pytest tests/chart $(PYTEST_ARGS)

test-chaos: setup ## Run the fault-injection and fuzzing suites
	@$(PY) -m pytest tests/chaos $(PYTEST_ARGS)

demo: setup ## The main job: local cluster + operator + a 2x2 digits DDPJob with a mid-run kill
	@bash hack/demo.sh

SIM_STEPS ?= 1000000
SIM_SEED ?= 0
sim: venv ## The planner in a simulated cluster at length (SIM_STEPS=N SIM_SEED=S; docs/simulation.md)
	@$(PY) tests/sim/sim_run.py --steps $(SIM_STEPS) --seed $(SIM_SEED)

bench: setup ## Run the benchmarks (not part of make test); results in bench/results
	@bash bench/run.sh
