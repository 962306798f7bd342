"""The training loop: resume from the newest checkpoint, step until the target, checkpoint on cadence and on
SIGTERM, report progress, evaluate on rank 0."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator, Sized
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.utils.data import DataLoader

from . import exit_codes
from .batching import BatchPlan, SamplePosition, global_batch_size, loss_scale, plan_batches, split_sizes
from .checkpoint import CheckpointStore, CheckpointUnreadable
from .checkpoint_dcp import DcpStore, checkpoint_format, meta_request, model_and_optimizer_keys
from .compile_watch import CompileWatch
from .config import Config
from .ddp_model import WithLoss, autocast_context, bare_model, make_optimizer, wrap_model
from .device_options import (
    apply_tf32,
    bf16_supported,
    cpu_count,
    loader_workers,
    peak_tflops,
    precision,
    use_compile,
    use_fused,
)
from .distributed_env import DistEnv
from .final_step import write_final_step
from .lr_schedule import LearningRateSchedule, peak_lr_for_batch, reference_batch, scaling_rule
from .metrics import TrainerMetrics, metrics_address, serve
from .micro_batch import AUTO, device_key, device_key_here, optimizer_state_bytes, probe_cuda, unsynced_batchnorm
from .phase_timer import PhaseTimer
from .preemption import PreemptionFlag, StepVote
from .progress_log import Identity, done_line, emit, progress_line, resumed_line, sized_line, warn
from .resume_checks import RunShape, check_keys, check_resumable, check_shapes, state_keys, state_shapes
from .rng_state import capture_rng, rank_seed, restore_rng, seed_everything
from .sample_windows import SampleWindows
from .storage_retry import describe
from .workloads import Workload, build_workload

if TYPE_CHECKING:  # torchft is imported only in its mode; replica_groups imports nothing of this module
    from .replica_groups import ReplicaGroups


class Trainer:
    def __init__(
        self,
        cfg: Config,
        env: DistEnv,
        device: torch.device,
        who: Identity,
        workload: Workload | None = None,
        replicas: ReplicaGroups | None = None,
    ):
        self.cfg, self.env, self.device, self.who = cfg, env, device, who
        self.replicas = replicas  # torchft replica groups (replica_groups.py); None: one DDP group
        # The ranks the global batch is split across, and this rank's place: all groups' ranks under torchft.
        self.data_world, self.data_rank = replicas.data_shard() if replicas else (env.world_size, env.rank)
        self.talks = cfg.log.all_ranks or env.local_rank == 0  # one progress stream per pod by default
        self.created = time.monotonic()
        seed_everything(cfg.train.seed)  # identical initial weights on every rank
        self.workload = workload or build_workload(cfg)
        # Then distinct streams (dropout, augmentation), by the rank's place among all groups' ranks: under torchft
        # every group has a rank 0, and they would share one stream.
        seed_everything(rank_seed(cfg.train.seed, self.data_rank, 0))
        self.dataset_len = len(cast(Sized, self.workload.train_set))
        apply_tf32(cfg.ddp.tf32, device)
        self.precision = precision(cfg.ddp.autocast, device, bf16_supported(device))
        # fp16 needs its loss scaled so small gradients do not flush to zero; a disabled scaler is a pass-through.
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.precision == "fp16")
        device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
        self.peak_tflops = peak_tflops(device_name, cfg.metrics.peak_tflops)
        self.metrics = TrainerMetrics(who.job, env.rank, who.attempt)
        self.phases = PhaseTimer(self._observe_phases, device)  # CUDA events on a GPU, read a window late
        self.compiled, why_not = use_compile(cfg.ddp.compile, device, replica_groups=replicas is not None)
        if why_not and self.talks:
            self._warn(why_not)
        # Times the steps that compile, so the throughput leaves them out; None when nothing is compiled.
        self.compile_watch = CompileWatch(self.metrics, who, self.talks) if self.compiled else None
        if replicas is None:
            w = self.workload
            self.ddp, self.model = wrap_model(
                w.model, device, cfg.ddp, self._warn, self.compiled, w.compiled_sample_losses or w.sample_losses
            )
            self.optimizer = self.base_optimizer = make_optimizer(
                self.ddp, cfg.train, use_fused(cfg.train.fused, device)
            )
        else:
            # What steps (self.optimizer, torchft's wrapper: its step() asks the groups to commit, once a step) and
            # what checkpoints and heals read and write (the optimizer inside: DCP's state-dict helpers call step()
            # to create a fresh optimizer's state, which through the wrapper would be a commit of its own).
            self.ddp, self.model, self.optimizer, self.base_optimizer = replicas.wrap(self)
        # Compiled, self.model(x, y) is the per-sample losses, the loss in the model's graph (ddp_model.WithLoss);
        # else self.model(x) is the output, and the workload's loss runs after it.
        self.loss_in_model = isinstance(self.ddp.module, WithLoss)
        self.net = bare_model(self.ddp.module)  # the workload's model: what checkpoints and evaluation read
        self.global_batch = global_batch_size(
            self.data_world, cfg.train.batch_size_per_rank, cfg.train.global_batch_size
        )
        # What this group trains on per step: the global batch, or its share under torchft (B / groups).
        self.group_batch = self.global_batch * env.world_size // self.data_world
        self.plan = self._plan_batches(micro_batch_limit=max(0, cfg.train.micro_batch_size))
        # --train.micro-batch-size auto: how the limit was settled (micro_batch.py), for the sized line; and on CUDA
        # the device it was found on, which checkpoints keep
        self.micro_batch_auto: str | None = None
        self.micro_batch_found: dict | None = None
        t = cfg.train
        self.schedule = LearningRateSchedule(
            peak_lr=peak_lr_for_batch(
                t.lr,
                self.global_batch,
                reference_batch(t.lr_reference_batch, t.global_batch_size, t.batch_size_per_rank),
                scaling_rule(t.lr_scaling, t.optimizer),
            ),
            total_steps=cfg.train.steps,
            warmup_steps=cfg.train.warmup_steps,
            decay=cfg.train.decay,
            min_lr_ratio=cfg.train.min_lr_ratio,
        )
        self.store: CheckpointStore | DcpStore | None = None
        if cfg.checkpoint.dir and checkpoint_format(cfg.checkpoint.format, device) == "dcp":
            self.store = DcpStore(
                cfg.checkpoint.dir, cfg.checkpoint.keep, self._warn, cfg.checkpoint.async_save, env.rank
            )
        elif cfg.checkpoint.dir:
            self.store = CheckpointStore(cfg.checkpoint.dir, cfg.checkpoint.keep, self._warn)
        self.save_started: dict[int, float] = {}  # dcp: step -> when its save began, until it is in place
        self.metrics.world_size.set(env.world_size)
        self.metrics.total_steps.set(cfg.train.steps)
        self.metrics.set_restarts(env.restart_count)
        self.preemption = PreemptionFlag().install()
        if self.compiled:
            self.preemption.watch_compiles()  # the stuck-step watch leaves compiling alone
        self.vote = StepVote(self.preemption)
        self.asked_to_save = False  # rank 0 cast a vote for a checkpoint by time that has not been written yet
        self.saved_after_ballot = 0  # ballots the vote had cast when the last checkpoint was written
        self.step, self.samples, self.position = 0, 0, SamplePosition()
        self.last_checkpoint_step, self.last_checkpoint_time = -1, time.monotonic()
        self.checkpoint_load_seconds = 0.0
        self.last_loss = float("nan")
        # The samples each log window counts and rates: those this process trained (not a heal's, nor a compile's)
        self.windows = SampleWindows()
        # DDP's static_graph records the graph on the first backward and asserts if that one ran under no_sync.
        self.graph_recorded = not cfg.ddp.static_graph

    def serve_metrics(self) -> bool:
        return serve(self.metrics, metrics_address(self.cfg.metrics.port, self.env.local_rank), self._warn)

    @property
    def rank_batch(self) -> int:
        """This rank's share of the global batch: B/N, the first B % N ranks one more."""
        return self.plan.rank_batch(self.data_rank)

    def sized_line(self) -> str:
        """How this attempt shares the global batch, and the peak LR it uses (after resume: the checkpoint holds
        the micro-batch limit)."""
        p, rank = self.plan, self.data_rank
        return sized_line(
            self.who,
            p.world_size,
            p.global_batch,
            p.rank_batch(rank),
            p.micro_batch(rank),
            p.accum_steps,
            self.schedule.peak_lr,
            self.micro_batch_auto,
        )

    def _plan_batches(self, micro_batch_limit: int) -> BatchPlan:
        return plan_batches(self.global_batch, self.data_world, self.cfg.train.grad_accum_steps, micro_batch_limit)

    def resume(self) -> bool:
        """Load the newest valid checkpoint on every rank. Rank 0 chooses it and tells the others, so all ranks
        load the same one even while an older writer's files come and go. A torchft replica group that healed from
        a live peer in its first quorum reads none."""
        if self.replicas is not None and self.replicas.join():
            return False
        if self.store is None:
            return False
        started = time.monotonic()
        if isinstance(self.store, DcpStore):
            return self._resume_dcp(self.store, started)
        return self._resume_file(self.store, started)

    def _resume_file(self, store: CheckpointStore, started: float) -> bool:
        """Rank 0 picks the newest file that loads (a damaged one is skipped with a warning) and tells the others,
        with the names it saw: when none loads the run stops rather than start again at step 0. One of another run
        (shape, model or optimizer) stops it."""
        chosen = store.newest_valid() if self.env.rank == 0 else None
        names = [p.name for _, p in reversed(store.list_steps())] if self.env.rank == 0 else []
        box: list = [str(chosen[0]) if chosen else None, names]
        dist.broadcast_object_list(box, src=0)
        if box[0] is None:
            if box[1]:
                raise CheckpointUnreadable(store.directory, box[1])
            return False
        state = chosen[1] if chosen else store.load(Path(box[0]))
        if state is None:
            raise RuntimeError(f"rank {self.env.rank} cannot read checkpoint {box[0]} that rank 0 chose")
        check_resumable(box[0], state, self.shape)
        get_state_dict(self.net, self.base_optimizer)  # creates a fresh optimizer's entries, to compare
        # A checkpoint taken before the optimizer's first step has no entries of its own to compare.
        optimizer = self.base_optimizer.state_dict() if state["optimizer"]["state"] else None
        check_keys(
            box[0],
            state_keys(state["model"], state["optimizer"]),
            state_keys(self.net.state_dict(), optimizer),
        )
        check_shapes(
            box[0],
            state_shapes(state["model"], state["optimizer"]),
            state_shapes(self.net.state_dict(), optimizer),
        )
        self.net.load_state_dict(state["model"])
        self.base_optimizer.load_state_dict(state["optimizer"])
        self._resumed(state, started)
        self._restore_rng(state)  # after the step is set: a rank without a saved stream is seeded by it
        return True

    def _resume_dcp(self, store: DcpStore, started: float) -> bool:
        """Rank 0 lists the checkpoints, newest first; every rank loads the first one that loads on all. A damaged
        one (no metadata, a shard missing or cut short) gives way to the one before; when none is left the run
        stops rather than start again at step 0. One of another run (shape, model or optimizer) stops it."""
        box: list[list[str] | None] = [
            [str(p) for _, p in reversed(store.list_steps())] if self.env.rank == 0 else None
        ]
        dist.broadcast_object_list(box, src=0)
        paths = [Path(p) for p in box[0] or []]
        for path in paths:
            loaded = self._load_dcp(store, path)
            if loaded is None:
                continue
            state, rng = loaded
            self._resumed(state, started)
            if rng is not None:
                restore_rng(rng)
            else:  # a rank the writing group did not have (it grew), or another replica group
                seed_everything(rank_seed(self.cfg.train.seed, self.data_rank, self.step))
            return True
        if paths:
            raise CheckpointUnreadable(store.directory, [p.name for p in paths])
        # A run that wrote `file` checkpoints before (a CPU attempt, an older image) goes on from them.
        return self._resume_file(CheckpointStore(store.directory, store.keep, self._warn), started)

    def _load_dcp(self, store: DcpStore, path: Path) -> tuple[dict, dict | None] | None:
        """Load one checkpoint on every rank: its run figures (checked first), then weights and optimizer state
        (their entries checked against this run's), then this rank's RNG stream if it has one; None when some
        rank could not read it (a collective: every rank takes the same turns)."""
        keys, error = store.read_entries(path)
        if not store.loaded_everywhere(error):
            self._unreadable(store, path, error)
            return None
        meta: dict = {"meta": meta_request(keys)}
        error = store.load(path, meta)
        if not store.loaded_everywhere(error):
            self._unreadable(store, path, error)
            return None
        check_resumable(str(path), meta["meta"], self.shape)
        model, optim = get_state_dict(self.net, self.base_optimizer)
        ours = model_and_optimizer_keys(keys)
        check_keys(str(path), ours, state_keys(model, optim))
        stored = {k: shape for k in ours if (shape := keys[k]) is not None}
        check_shapes(str(path), stored, state_shapes(model, optim))
        mine = str(self.data_rank)
        request: dict = {"model": model, "optim": optim}
        if any(k.startswith(f"rng.{mine}.") for k in keys):
            request["rng"] = {mine: capture_rng()}
        error = store.load(path, request)
        if not store.loaded_everywhere(error):
            self._unreadable(store, path, error)
            return None
        set_state_dict(self.net, self.base_optimizer, model_state_dict=model, optim_state_dict=optim)
        return meta["meta"], request.get("rng", {}).get(mine)

    def _unreadable(self, store: DcpStore, path: Path, error: BaseException | None) -> None:
        why = describe(error) if error else "it failed on another rank"
        self._warn(f"skipping unreadable checkpoint {path.name}: {why}")
        store.mark_unreadable(path)  # not counted by the pruning, which would keep it over the one resumed from

    def _resumed(self, state: dict, started: float) -> None:
        """What a loaded checkpoint sets beside the weights: the step, the data position, the schedule, the batch
        plan, the metrics."""
        self.step, self.samples = int(state["step"]), int(state["samples"])
        self.position = SamplePosition(int(state["epoch"]), int(state["offset"]))
        if "scheduler" in state:
            self.schedule = self.schedule.continued_from(state["scheduler"], self.step)
        if state.get("scaler"):  # fp16: go on at the scale reached, not back off again from 65,536
            self.scaler.load_state_dict(state["scaler"])
        if self.cfg.train.micro_batch_size == 0 and "micro_batch_limit" in state:
            # What the first attempt ran fit in memory; a smaller group accumulates more rather than run larger.
            self.plan = self._plan_batches(micro_batch_limit=int(state["micro_batch_limit"]))
        if self._keeps_micro_batch(state.get("micro_batch_auto")):
            found = state["micro_batch_auto"]
            self.plan = self._plan_batches(micro_batch_limit=int(found["limit"]))
            self.micro_batch_auto, self.micro_batch_found = "kept", dict(found)
        self.last_checkpoint_step = self.step
        self.metrics.record_checkpoint(self.step, state.get("time"))
        self.checkpoint_load_seconds = time.monotonic() - started
        self.metrics.checkpoint_load_seconds.set(self.checkpoint_load_seconds)
        if self.replicas is not None:
            self.replicas.resumed(state)
        if self.talks:
            emit(resumed_line(self.who, self.step, self.samples, int(state["world_size"])))

    def _keeps_micro_batch(self, found: dict | None) -> bool:
        """--train.micro-batch-size auto: a checkpoint's answer holds on the device it was found on (its name and
        memory); on another the probe runs again."""
        here = device_key_here(self.device)
        if self.cfg.train.micro_batch_size != AUTO or not found or here is None:
            return False
        return {k: found.get(k) for k in ("device", "memory")} == here

    def settle_micro_batch(self) -> None:
        """--train.micro-batch-size auto, after resume (a checkpoint from the same device keeps its answer): on CUDA
        probe for the largest micro-batch that fits, the ranks agreeing on the smallest; on CPU the rank's share."""
        if self.cfg.train.micro_batch_size != AUTO or self.micro_batch_auto is not None:
            return
        if self.device.type != "cuda":
            self.micro_batch_auto = "share"  # no device memory to fill: the share in --train.grad-accum-steps
            return
        upper = self.plan.largest_micro_batch
        limit = probe_cuda(
            self._probe_step(), self.device, optimizer_state_bytes(self.net, self.cfg.train.optimizer), upper
        )
        smallest = torch.tensor([limit], device=self.device)
        dist.all_reduce(smallest, op=dist.ReduceOp.MIN)
        agreed = int(smallest.item())
        if agreed < 1:
            raise RuntimeError("--train.micro-batch-size auto: not one sample's forward and backward fits the device")
        self.plan = self._plan_batches(micro_batch_limit=agreed)
        self.micro_batch_auto = "probed"
        self.micro_batch_found = {**device_key(self.device), "limit": agreed}

    def _probe_step(self):
        """A forward and backward of the bare module (no DDP, SyncBatchNorm run unsynced: no collective, which ranks
        probing sizes of their own would pair wrongly) on the first m samples of this rank's first batch. Nothing of
        it stays: gradients are dropped, BatchNorm's running statistics and the RNG streams (dropout) are put back, so
        the run trains as it would have without the probe."""
        module = self.net
        inputs, targets = self._next_batch(iter(self.data_loader()))
        buffers = {name: b.detach().clone() for name, b in module.named_buffers()}
        rng = capture_rng()

        def run_at(m: int) -> None:
            try:
                with unsynced_batchnorm(module), autocast_context(self.device, self.precision):
                    output = module(inputs[:m])
                self.workload.sample_losses(output, targets[:m]).sum().backward()
            finally:
                module.zero_grad(set_to_none=True)
                with torch.no_grad():
                    for name, b in module.named_buffers():
                        b.copy_(buffers[name])
                restore_rng(rng)

        return run_at

    @property
    def shape(self) -> RunShape:
        t = self.cfg.train
        return RunShape(self.workload.name, self.dataset_len, t.global_batch_size, t.batch_size_per_rank)

    def _restore_rng(self, state: dict) -> None:
        """Each rank continues a stream of its own. A rank the writing group did not have (it grew, or under torchft
        the ranks of the other groups) gets a new one; so do ranks other than 0 after a checkpoint from before
        per-rank states were kept."""
        per_rank = state.get("rng_per_rank")
        if per_rank is not None and self.data_rank < len(per_rank):
            restore_rng(per_rank[self.data_rank])
        elif per_rank is None and self.data_rank == 0 and "rng" in state:
            restore_rng(state["rng"])
        else:
            seed_everything(rank_seed(self.cfg.train.seed, self.data_rank, self.step))

    def train(self, finish: bool = True) -> int:
        """Step until --train.steps. finish=False skips the final checkpoint, evaluation and done line (the
        benchmark calls train() in slices)."""
        cfg = self.cfg
        loader = self.data_loader()
        batches = iter(loader)
        window_steps = 0
        self.windows.start(self.samples, time.monotonic())
        loss_sum = torch.zeros((), device=self.device)
        self.metrics.count_samples(0, self.samples)
        self.metrics.step.set(self.step)
        again: tuple[torch.Tensor, torch.Tensor] | None = None  # torchft: the batch of a step not committed
        self.preemption.loop_started()
        while self.step < cfg.train.steps:
            if self.replicas is not None:
                before = self.samples
                with self.preemption.not_computing():  # the quorum (and a heal): its own timeout, not the watch's
                    healed = self.replicas.start_step()
                if healed:  # the data goes on at its step; the steps it skipped were a peer's work
                    self.windows.received(self.samples - before)
                    batches, again = iter(self.data_loader()), None
            started = time.monotonic()
            t0 = self.phases.mark()
            inputs, targets = again if again is not None else self._next_batch(batches)
            t1 = self.phases.mark()
            lr = self.schedule.apply(self.optimizer, self.step)
            loss_sum += self._forward_backward(inputs, targets)
            t2 = self.phases.mark()
            if cfg.train.grad_clip > 0:
                self.scaler.unscale_(self.optimizer)  # clip the true gradients, not the scaled ones (fp16)
                torch.nn.utils.clip_grad_norm_(self.ddp.parameters(), cfg.train.grad_clip)
            self.scaler.step(self.optimizer)  # fp16: skipped when a gradient overflowed; else optimizer.step()
            self.scaler.update()
            self.optimizer.zero_grad(set_to_none=True)
            t3 = self.phases.mark()
            if self.replicas is None:
                self.step += 1
                self.samples += self.global_batch
                self.position = self.position.after_batch(self.global_batch, self.dataset_len)
            else:  # not committed: the step runs again on the batch in hand (the step, and so the data, stayed)
                again = (inputs, targets) if self.replicas.after_step() else None
            window_steps += 1
            self.preemption.step_ended()
            self.phases.step((t0, t1, t2, t3))
            if self.compile_watch is not None and self.compile_watch.compiled_in_step(self.step, started):
                self.windows.restart_rate(self.samples, time.monotonic())
            if self.step % cfg.log.every_steps == 0 or self.step == cfg.train.steps:
                self._report(loss_sum, window_steps, lr)
                self.phases.window_done()
                loss_sum.zero_()
                window_steps = 0
                self.windows.start(self.samples, time.monotonic())
            if isinstance(self.store, DcpStore):
                self._checkpoint_in_place(self.store.poll())
            verdict = self.vote.step(ask_to_save=self._time_to_save())
            if verdict.stop:
                return self._preempted()
            if self._checkpoint_due(verdict.save):
                with self.preemption.writing_checkpoint():  # a SIGTERM now never cuts it short
                    self.save_checkpoint()
        self.vote.settle()
        self.preemption.loop_ended()
        self.phases.flush()
        if not finish:
            return exit_codes.OK
        if cfg.checkpoint.on_finish and self.last_checkpoint_step != self.step:
            self.save_checkpoint()
        self.wait_for_checkpoint()
        self._finish(time.monotonic() - self.created)
        return exit_codes.OK

    def _preempted(self) -> int:
        self.vote.settle()
        with self.preemption.writing_checkpoint():
            self.save_checkpoint()
            self.wait_for_checkpoint()  # within the grace period: staging is a copy, the writes are spread over ranks
        if self.talks:
            emit(
                f"{self.who.prefix} preempted ({self.preemption.signal_name or 'peer'}): "
                f"checkpoint written step={self.step}, exiting with {exit_codes.PREEMPTED}"
            )
        return exit_codes.PREEMPTED

    def data_loader(self) -> DataLoader:
        """The data pipeline train() iterates (bench_gpu.baseline_throughput times a bare loop over the same one)."""
        from .sampler import GlobalBatchSampler

        data = self.workload.train_set
        sampler = (
            GlobalBatchSampler(
                data,
                self.env.world_size,
                self.env.rank,
                self.global_batch,
                self.position,
                shuffle=self.cfg.data.shuffle,
                seed=self.cfg.train.seed,
            )
            if self.replicas is None
            else self.replicas.batch_sampler(data)
        )
        # A generator of its own: the DataLoader draws its workers' base seed when an iterator starts, and a draw
        # from the global stream would set a resumed run's stream one draw apart from an uninterrupted one.
        seeds = torch.Generator().manual_seed(rank_seed(self.cfg.train.seed, self.data_rank, self.step))
        workers = loader_workers(self.cfg.data.workers, self.device, cpu_count(), self.env.local_world_size)
        return DataLoader(
            data,
            batch_sampler=sampler,
            num_workers=workers,
            pin_memory=self.cfg.data.pin_memory and self.device.type == "cuda",
            collate_fn=_already_batched if getattr(data, "returns_batches", False) else None,
            prefetch_factor=4 if workers > 0 and self.device.type == "cuda" else None,
            persistent_workers=workers > 0,
            worker_init_fn=_ignore_sigterm,
            generator=seeds,
        )

    def _forward_backward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Gradient accumulation: k micro-batches, all but the last inside no_sync (forward included, so DDP
        does not prepare a reduction it will not run), and the last one all-reduces the summed gradients."""
        k = self.plan.accum_steps
        scale = loss_scale(self.data_world, self.global_batch)
        sizes = split_sizes(len(inputs), k)
        total = torch.zeros((), device=self.device)
        for i, (x, y) in enumerate(zip(inputs.split(sizes), targets.split(sizes), strict=True)):
            # Until the static graph is recorded every micro-batch syncs: more traffic on one step, same result,
            # since DDP's averaging is linear in the gradients.
            with contextlib.nullcontext() if i == k - 1 or not self.graph_recorded else self.ddp.no_sync():
                losses = self._sample_losses(x, y)
                self.scaler.scale(losses.sum() * scale).backward()
            total += losses.detach().sum()
        self.graph_recorded = True
        return total

    def _sample_losses(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        try:
            with autocast_context(self.device, self.precision):
                if self.loss_in_model:
                    return self.model(x, y)
                output = self.model(x)
        except Exception as e:
            if not (self.compiled and self.cfg.ddp.compile == "auto" and compile_failed(e)):
                raise
            self._run_eager(e)
            return self._sample_losses(x, y)
        return self.workload.sample_losses(output, y)

    def _run_eager(self, error: BaseException) -> None:
        """--ddp.compile auto: a compiler that fails (a missing C++ toolchain, an inductor bug, an unsupported op)
        costs the run its speed-up, not the run. The same DDP module runs eagerly from here on (a compiled loss stays
        in it, unfused); --ddp.compile on keeps the error."""
        said = " ".join(line.strip() for line in str(error).splitlines()[:2] if line.strip())  # "backend raised:" + why
        self._warn(
            f"compile auto: torch.compile failed ({type(error).__name__}: {said[:300]}); training eagerly. "
            "--ddp.compile on makes this an error, off skips compiling"
        )
        self.model, self.compiled, self.compile_watch = self.ddp, False, None

    def _observe_phases(self, data: float, forward_backward: float, optimizer: float) -> None:
        self.metrics.phase["data"].observe(data)
        self.metrics.phase["forward_backward"].observe(forward_backward)
        self.metrics.phase["optimizer"].observe(optimizer)

    def _report(self, loss_sum: torch.Tensor, steps: int, lr: float) -> None:
        """One all-reduce per log window carries the loss: the group mean over the window. The window closes after
        `.item()`, which waits for the device: on a GPU the window's queued kernels are counted in its seconds,
        not left to the next window (a window read before the sync made throughput read high)."""
        packed = loss_sum.float().reshape(1)
        dist.all_reduce(packed)
        loss = self.last_loss = packed.item() / (self.group_batch * steps)
        m = self.metrics
        m.step.set(self.step)
        m.count_samples(self.windows.counted(self.samples), self.samples)  # under torchft: the committed samples
        # The throughput leaves out a step that compiled (compile_watch.py); a window that was all compiling keeps
        # the last figure.
        throughput = self.windows.rate(self.samples, time.monotonic())
        m.samples_per_second.set(throughput)
        if self.workload.tokens_per_sample > 0:
            m.tokens_per_second.set(throughput * self.workload.tokens_per_sample)
        if self.peak_tflops and self.workload.flops_per_sample > 0:
            m.mfu.set(throughput * self.workload.flops_per_sample / self.data_world / (self.peak_tflops * 1e12))
        m.loss.set(loss)
        m.learning_rate.set(lr)
        if self.device.type == "cuda":
            m.gpu_memory_bytes.set(torch.cuda.memory_allocated(self.device))
        if self.talks:
            emit(progress_line(self.who, self.step, self.cfg.train.steps, self.position.epoch, loss, lr, throughput))

    def _next_batch(self, batches: Iterator) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, targets = next(batches)
        return inputs.to(self.device, non_blocking=True), targets.to(self.device, non_blocking=True)

    def _checkpoint_due(self, asked: bool) -> bool:
        """A checkpoint by steps, or by time (`asked`: rank 0's request, through the vote), unless this step has one
        already: under torchft a step the groups did not commit leaves the step where it was, and each
        retry at a checkpoint's step would write that checkpoint again."""
        if self.store is None or self.step >= self.cfg.train.steps or not (asked or self._save_by_steps()):
            return False
        if self.step == self.last_checkpoint_step:
            self.asked_to_save = False  # the checkpoint of this step answers a request by time too
            return False
        # A request by time read a step late (the vote is asynchronous on a GPU), which a save made after it was cast
        # (the step cadence's, at that step) answered already: a second save would only repeat it.
        answered = asked and not self._save_by_steps() and self.saved_after_ballot >= self.vote.read_ballot
        return not answered

    def _save_by_steps(self) -> bool:
        every = self.cfg.checkpoint.every_steps
        return every > 0 and self.step % every == 0

    def _time_to_save(self) -> bool:
        """Rank 0's clock decides, once per checkpoint; the vote tells the other ranks at which step."""
        every = self.cfg.checkpoint.every_seconds
        if self.store is None or self.env.rank != 0 or every <= 0 or self.asked_to_save:
            return False
        self.asked_to_save = time.monotonic() - self.last_checkpoint_time >= every
        return self.asked_to_save

    def save_checkpoint(self) -> None:
        """Every rank gives its RNG state to rank 0, which writes; the others go on and meet it at the next
        collective."""
        if self.store is None:
            return
        if self.replicas is not None and not self.replicas.writes_checkpoints():
            self.asked_to_save = False  # another replica group writes this step
            return
        started = time.monotonic()
        now = time.time()
        meta = {
            "step": self.step,
            "samples": self.samples,
            "epoch": self.position.epoch,
            "offset": self.position.offset,
            "world_size": self.env.world_size,
            "global_batch": self.global_batch,
            "micro_batch_limit": self.plan.micro_batch_limit,
            **({"micro_batch_auto": self.micro_batch_found} if self.micro_batch_found else {}),
            "workload": self.workload.name,
            "shape": self.shape.state_dict(),
            "scheduler": self.schedule.state_dict(),
            "time": now,
            "scaler": self.scaler.state_dict(),  # fp16's scale and growth tracker; {} when fp16 is off
            **(self.replicas.checkpoint_meta() if self.replicas is not None else {}),
        }
        if isinstance(self.store, DcpStore):
            model, optim = get_state_dict(self.net, self.base_optimizer)
            self.save_started[self.step] = started
            # Returns once staged (async): the step goes on while the background thread writes.
            rng = {str(self.data_rank): capture_rng()}
            self.store.save(self.step, {"model": model, "optim": optim, "rng": rng, "meta": meta})
            if not self.store.asynchronous:
                self._checkpoint_in_place(self.step)
        else:
            rng_per_rank = gather_to_rank_0(capture_rng(), self.env)
            if self.env.rank == 0:
                self.store.save(
                    {
                        **meta,
                        "model": self.net.state_dict(),
                        "optimizer": self.base_optimizer.state_dict(),
                        "rng_per_rank": rng_per_rank,
                    }
                )
            self.metrics.record_checkpoint(self.step, now)
            self.metrics.last_checkpoint_seconds.set(time.monotonic() - started)
        self.last_checkpoint_step, self.last_checkpoint_time = self.step, time.monotonic()
        self.saved_after_ballot = self.vote.cast
        self.metrics.checkpoint_save_seconds.observe(self.last_checkpoint_time - started)
        self.asked_to_save = False

    def _checkpoint_in_place(self, step: int | None) -> None:
        """A dcp save has finished and is in place: its step and whole duration reach the metrics."""
        if step is None:
            return
        started = self.save_started.pop(step, None)
        self.metrics.record_checkpoint(step)
        if started is not None:
            self.metrics.last_checkpoint_seconds.set(time.monotonic() - started)

    def wait_for_checkpoint(self) -> None:
        if isinstance(self.store, DcpStore):
            self._checkpoint_in_place(self.store.wait())

    def _finish(self, wall_seconds: float) -> None:
        if self.env.rank != 0:
            return
        evaluate = self.workload.evaluate
        value = evaluate(self.net, self.device) if evaluate is not None else self.last_loss
        emit(done_line(self.who, self.cfg.train.steps, self.workload.final_metric, value, wall_seconds))
        write_final_step(self.step)

    def _warn(self, message: str) -> None:
        warn(self.who, message)


def compile_failed(error: BaseException) -> bool:
    """An error of torch.compile's (dynamo, the backend, inductor), not of the model or the data."""
    from torch._dynamo.exc import TorchDynamoException

    inductor_error = getattr(torch._inductor.exc, "InductorError", None) if hasattr(torch, "_inductor") else None
    return isinstance(error, TorchDynamoException) or (inductor_error is not None and isinstance(error, inductor_error))


def gather_to_rank_0(mine: dict, env: DistEnv) -> list[dict] | None:
    """Every rank's `mine`, in rank order, on rank 0 (None elsewhere)."""
    if not dist.is_initialized():
        return [mine]
    everyone: list | None = [None] * env.world_size if env.rank == 0 else None
    dist.gather_object(mine, everyone, dst=0)
    return everyone


def _already_batched(batch):
    return batch


def _ignore_sigterm(worker_id: int) -> None:
    """torchrun signals each worker's whole process group; a DataLoader worker killed by it would fail the next
    batch before the trainer reaches the step where it checkpoints. The workers exit with their parent anyway."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
