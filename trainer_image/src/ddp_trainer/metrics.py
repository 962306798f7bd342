"""Prometheus series per rank, on $POD_IP:<port + LOCAL_RANK>. Names are a contract with the Helm chart's alerts
and the operator's progress scrape. A registry per trainer (not the global one) keeps tests independent."""

from __future__ import annotations

import os
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

# The series a user's own loop serves too (ddp_trainer.report); each name is written here only. The operator's
# progress scrape reads step, loss and samples per second (tests/trainer/test_report.py holds it to that).
STEP_SERIES = "ddp_trainer_step"
LOSS_SERIES = "ddp_trainer_loss"
SAMPLES_SERIES = "ddp_trainer_samples"  # a counter from 0 in each process: scraped as ddp_trainer_samples_total
RUN_SAMPLES_SERIES = "ddp_trainer_run_samples"  # a gauge: the run's samples since step 0, across restarts
SAMPLES_PER_SECOND_SERIES = "ddp_trainer_samples_per_second"
WORLD_SIZE_SERIES = "ddp_trainer_world_size"
TOTAL_STEPS_SERIES = "ddp_trainer_total_steps"  # the step the run ends at: the operator's percent done and ETA
TORCHRUN_RESTARTS_SERIES = "ddp_trainer_torchrun_restarts"
# torchft replica groups only (replica_groups.py): the groups in this group's last quorum, and how often this group
# took its state from a live peer (a counter: scraped as ddp_trainer_heals_total).
REPLICA_GROUPS_SERIES = "ddp_trainer_replica_groups"
HEALS_SERIES = "ddp_trainer_heals"
# What this trainer can do, one series per capability, `name` its label, value 1: the operator acts on a declared
# capability only (its tracking/progress.py reads it; the names are the operator's api.CAPABILITY_SERIES and
# api.LIGHTHOUSE_RECONNECT, tests/trainer/test_capability_series.py).
CAPABILITY_SERIES = "ddp_trainer_capability"
# The replica groups follow a Lighthouse made again (replica_groups.py): the operator then replaces the Lighthouse
# alone instead of recreating the whole group.
LIGHTHOUSE_RECONNECT = "lighthouse_reconnect"
# The DDPJob's name is `ddpjob`: `job` is Prometheus' own target label (the scrape config's name), which a series
# of ours would only keep with honorLabels.
LABELS = ("ddpjob", "attempt", "rank")
DEFAULT_PORT = 9400  # --metrics.port's default (config.MetricsConfig); the endpoint is on this + LOCAL_RANK
PORT_ENV = "DDP_TRAINER_METRICS_PORT"  # the env form of --metrics.port (config.env_name)

CHECKPOINT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
PHASE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def label_values(job: str, attempt: str, rank: int) -> dict[str, str]:
    return {"ddpjob": job, "attempt": attempt, "rank": str(rank)}


class TrainerMetrics:
    def __init__(self, job: str, rank: int, attempt: str = "0"):
        self.registry = CollectorRegistry()
        self._capabilities: Gauge | None = None  # add_capability's, registered at the first
        labels = LABELS
        self._labels = label_values(job, attempt, rank)

        def gauge(name, doc):
            return Gauge(name, doc, labels, registry=self.registry).labels(**self._labels)

        def counter(name, doc):  # scraped as NAME_total
            return Counter(name, doc, labels, registry=self.registry).labels(**self._labels)

        self.step = gauge(STEP_SERIES, "Optimizer steps completed (global, survives restarts)")
        self.samples_total = counter(
            SAMPLES_SERIES, "Training samples the whole group consumed while this process ran (from 0 at each start)"
        )
        self.run_samples = gauge(RUN_SAMPLES_SERIES, "Training samples the run consumed since step 0, across restarts")
        self.tokens_per_second = gauge(
            "ddp_trainer_tokens_per_second", "Group throughput in tokens over the last log window (token workloads)"
        )
        self.samples_per_second = gauge(SAMPLES_PER_SECOND_SERIES, "Group throughput over the last log window")
        self.mfu = gauge(
            "ddp_trainer_mfu",
            "Model FLOPs utilisation over the last log window: achieved / peak (--metrics.peak-tflops or the device's)",
        )
        self.loss = gauge(LOSS_SERIES, "Training loss, mean over the group at the last log step")
        self.learning_rate = gauge("ddp_trainer_learning_rate", "Current learning rate")
        self.world_size = gauge(WORLD_SIZE_SERIES, "Ranks in the process group")
        self.total_steps = gauge(TOTAL_STEPS_SERIES, "The step the run ends at (--train.steps)")
        self.torchrun_restarts = gauge(
            TORCHRUN_RESTARTS_SERIES, "torchrun in-place restarts (TORCHELASTIC_RESTART_COUNT)"
        )
        self.last_checkpoint_step = gauge("ddp_trainer_last_checkpoint_step", "Step of the newest checkpoint")
        self.last_checkpoint_timestamp = gauge(
            "ddp_trainer_last_checkpoint_timestamp_seconds", "Unix time of the newest checkpoint (age = time() - this)"
        )
        self.gpu_memory_bytes = gauge("ddp_trainer_gpu_memory_bytes", "CUDA memory allocated by this rank")
        self.checkpoint_save_seconds = Histogram(
            "ddp_trainer_checkpoint_save_seconds",
            "From the start of a save to its last byte on disk, as this rank waited for it (rank 0 writes)",
            labels,
            buckets=CHECKPOINT_BUCKETS,
            registry=self.registry,
        ).labels(**self._labels)
        self.last_checkpoint_seconds = gauge(
            "ddp_trainer_last_checkpoint_duration_seconds",
            "The newest checkpoint's save, from its start to its files in place (dcp: staging and background writes)",
        )
        self.checkpoint_load_seconds = gauge(
            "ddp_trainer_checkpoint_load_seconds", "Time this start spent choosing and loading its checkpoint"
        )
        self.compile_seconds = counter(
            "ddp_trainer_compile_seconds",
            "Seconds of the steps in which torch.compile compiled a graph (left out of the throughput)",
        )
        self.compiled_graphs = counter(
            "ddp_trainer_compiled_graphs",
            "Graphs torch.compile compiled in this process (from 0 at each start: a restart or resize compiles again)",
        )
        phase = Histogram(
            "ddp_trainer_step_phase_seconds",
            "Step time by phase",
            (*labels, "phase"),
            buckets=PHASE_BUCKETS,
            registry=self.registry,
        )
        self.phase = {p: phase.labels(**self._labels, phase=p) for p in ("data", "forward_backward", "optimizer")}

    def add_replica_group_series(self) -> tuple[Gauge, Counter]:
        """The torchft series, registered only in that mode so a plain DDP scrape is what it was."""
        groups = Gauge(
            REPLICA_GROUPS_SERIES, "Replica groups in this group's last torchft quorum", LABELS, registry=self.registry
        ).labels(**self._labels)
        heals = Counter(
            HEALS_SERIES, "Times this replica group took its state from a live peer", LABELS, registry=self.registry
        ).labels(**self._labels)
        return groups, heals

    def add_capability(self, name: str) -> None:
        """Declare a capability (CAPABILITY_SERIES{name=...} 1); declaring one twice is one series."""
        if self._capabilities is None:
            self._capabilities = Gauge(
                CAPABILITY_SERIES,
                "What this trainer can do, by name (1: it can)",
                (*LABELS, "name"),
                registry=self.registry,
            )
        self._capabilities.labels(**self._labels, name=name).set(1)

    def set_restarts(self, count: int) -> None:
        self.torchrun_restarts.set(count)

    def count_samples(self, consumed: int, run_total: int) -> None:
        """`consumed` samples since the last call; the counter starts at 0 in every process, as counters do, so
        increase() and rate() never see a resumed run's whole count as one jump."""
        self.samples_total.inc(consumed)
        self.run_samples.set(run_total)

    def record_checkpoint(self, step: int, when: float | None = None) -> None:
        self.last_checkpoint_step.set(step)
        self.last_checkpoint_timestamp.set(time.time() if when is None else when)


def metrics_address(base_port: int, local_rank: int, environ=None) -> tuple[str, int] | None:
    if base_port == 0:
        return None
    env = os.environ if environ is None else environ
    return env.get("POD_IP") or "0.0.0.0", base_port + local_rank


def serve(metrics: TrainerMetrics, address: tuple[str, int] | None, warn) -> bool:
    """Start the endpoint; a taken port costs the metrics, never the training run."""
    if address is None:
        return False
    try:
        start_http_server(address[1], addr=address[0], registry=metrics.registry)
    except OSError as e:
        warn(f"metrics endpoint disabled: cannot listen on {address[0]}:{address[1]}: {e}")
        return False
    return True
