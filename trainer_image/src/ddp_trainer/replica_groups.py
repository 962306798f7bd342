"""torchft replica groups: each pod is one replica group (a standalone torchrun inside it), and the groups average
gradients through torchft's Manager, coordinated by the job's Lighthouse (fault_tolerance.py reads the env).

What changes against the plain DDP path, and why:
- the model is torchft's DistributedDataParallel, whose comm hook all-reduces each bucket across the groups through
  the Manager. A group of more than one rank first averages inside the pod (the default group): torchft's process
  group joins only the ranks of equal group rank across groups;
- the optimizer is torchft's OptimizerWrapper: step() asks the Manager whether every group's step went through
  (should_commit) and steps only then. A peer that dies mid-step fails the step on the survivors, who skip it and
  go on without the peer once the Lighthouse's heartbeat timeout has passed. Checkpoints and heals read and write
  the optimizer inside it: DCP's state-dict helpers step a fresh optimizer to create its state, which through the
  wrapper would be a commit of its own;
- each step starts with a quorum (Manager.start_quorum) at the top of the loop, not in zero_grad as torchft's
  example does: the trainer clears gradients after the step too, and the last step's clearing must not ask for a
  quorum that finished peers will never join;
- the quorum is synchronous (use_async_quorum=False): a replacement group then heals (takes the weights, the
  optimizer and the trainer's counters from a live peer over HTTP) before its first forward pass, and the trainer
  knows at start whether a live peer exists. Only when none does (a whole-job start or restart) does it read the
  checkpoint. The price is the quorum's round trip in every step (a few ms on one host);
- init_sync=False: every group seeds the same initial weights (Trainer.__init__), so step 0 needs no transfer;
- the step is the Manager's (current_step), which only a committed step advances, and the data position follows it
  (replica_sampler.py); samples are the batches committed x a group's share of the global batch. A step not
  committed runs again on the batch in hand;
- the one group that is rank 0 in the quorum writes the checkpoints (every group would write the same step), with
  the Manager's own state beside the trainer's."""

import hashlib
import json
import os
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn

# torchft's Rust side logs six INFO lines a step (quorum and commit, on every rank); the trainer prints what
# changes (quorum_line, healed_line). RUST_LOG set by the pod wins. Read when torchft's module loads.
os.environ.setdefault("RUST_LOG", "warn")

from torchft.checkpointing import HTTPTransport  # type: ignore[import-untyped]  # noqa: E402
from torchft.ddp import DistributedDataParallel as TorchftDDP  # type: ignore[import-untyped]  # noqa: E402
from torchft.manager import Manager  # type: ignore[import-untyped]  # noqa: E402
from torchft.optim import OptimizerWrapper  # type: ignore[import-untyped]  # noqa: E402
from torchft.process_group import ProcessGroupGloo, ProcessGroupNCCL  # type: ignore[import-untyped]  # noqa: E402

from .batching import SamplePosition  # noqa: E402
from .config import Config  # noqa: E402
from .ddp_model import make_optimizer  # noqa: E402
from .distributed_env import DistEnv  # noqa: E402
from .fault_tolerance import BATCHES_COMMITTED_KEY, ReplicaGroupEnv  # noqa: E402
from .lighthouse_watch import LighthouseWatch, lighthouse_target  # noqa: E402
from .lr_schedule import LearningRateSchedule  # noqa: E402
from .metrics import LIGHTHOUSE_RECONNECT, TrainerMetrics  # noqa: E402
from .progress_log import Identity, emit, healed_line, lighthouse_moved_line, quorum_line  # noqa: E402
from .replica_sampler import ReplicaBatchSampler, data_position, steps_per_epoch  # noqa: E402
from .rng_state import rank_seed, seed_everything  # noqa: E402
from .workloads import Workload  # noqa: E402


class GroupTrainer(Protocol):
    """What the replica groups read and write of the trainer (trainer.Trainer is one): its configuration and
    identity, the model and optimizer states a heal moves, and the step, samples and data position a quorum sets.
    Declared here so that this module needs nothing of trainer.py, which imports it."""

    cfg: Config
    device: torch.device
    who: Identity
    workload: Workload
    metrics: TrainerMetrics
    talks: bool
    ddp: Any
    base_optimizer: torch.optim.Optimizer
    schedule: LearningRateSchedule
    scaler: torch.amp.GradScaler
    step: int
    samples: int
    position: SamplePosition
    global_batch: int
    dataset_len: int
    compiled: bool

    @property
    def rank_batch(self) -> int: ...

    def _warn(self, message: str) -> None: ...


def ignored_ddp_options(ddp_cfg: Any) -> list[str]:
    """The --ddp options torchft's DDP cannot honour: its hook is the one comm hook, and it runs DDP with
    find_unused_parameters (buckets never rebuilt, so a healed group's match its peers'), which a static graph
    would contradict."""
    options = (("--ddp.static-graph", ddp_cfg.static_graph), ("--ddp.comm-hook", ddp_cfg.comm_hook != "none"))
    return [flag for flag, on in options if on]


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


class AdvertisedHTTPTransport(HTTPTransport):
    """torchft's heal transport, telling peers this pod's address instead of its host name (fault_tolerance.py:
    ADVERTISE_ENV). Its server already listens on every interface."""

    def __init__(self, advertise: str, **kwargs: Any) -> None:
        self._advertise = advertise  # before torchft's __init__, which may ask for the address already
        super().__init__(**kwargs)

    def address(self) -> str:
        port = self._server.socket.getsockname()[1]
        return f"http://{_host(self._advertise)}:{port}/checkpoint/"


class AdvertisedHandle:
    """A torchft process group whose reconfigure handle names this pod's address: torchft's own says
    `socket.gethostname()`, the pod's bare name, which the other groups' pods cannot resolve (cluster DNS answers
    `<pod>.<service>.<namespace>.svc`, not `<pod>`). Found on the real nodes: every group waited 60 s for the
    others' stores, and no step was ever committed. (The local node's hosts block resolved the bare name.) Its
    store still listens on every interface; only the address it tells its peers changes.

    The handle also says what this group's process group was last built for (`built_for`: the quorum's number and
    its groups), and each build's rendezvous keys go under a prefix of their own on this group's store (`/g<n>`).
    A new Lighthouse numbers its quorums from 1 again. torchft rebuilds only when the number changes, so a group
    whose process group was built for the old quorum 2 kept it in the new quorum 2 while its peer built a new one
    and waited for it (measured: 52 s, gloo's connect timing out, until commit failures moved the Lighthouse on),
    and a reused number would find an old build's keys on the store. With every group's `built_for` in each
    quorum, a quorum that some group's process group was not built for is built again by all (QuorumClient)."""

    advertise: str = ""
    built_for: str | None = None  # built_for_key() of the last build that succeeded
    builds: int = 0

    def get_reconfigure_handle(self) -> str:
        handle = json.loads(super().get_reconfigure_handle())  # type: ignore[misc]
        host, port = handle["store"].rsplit(":", 1)
        if self.advertise:
            host = _host(self.advertise)
        handle["store"] = f"{host}:{port}/g{self.builds}"
        handle[BUILT_FOR] = self.built_for
        return json.dumps(handle)

    def reconfigure(self, opts: Any) -> Any:
        work = super().reconfigure(opts)  # type: ignore[misc]
        self.builds += 1
        self.built_for = built_for_key(opts.uuid, list(opts.handles))
        return work


BUILT_FOR = "built_for"


def built_for_key(quorum_id: int, handles: list[str]) -> str:
    """A quorum as a process group is built for it: its number and its groups (their handles' ids, in order)."""
    return _key(quorum_id, [json.loads(h) for h in handles])


def _key(quorum_id: int, peers: list[dict[str, Any]]) -> str:
    ids = ",".join(str(peer.get("id")) for peer in peers)
    return f"{quorum_id}/{hashlib.sha1(ids.encode()).hexdigest()[:16]}"


def built_for_another(handles: list[str], quorum_id: int) -> bool:
    """Whether a group in this quorum (by the handle it sent with its request) has its process group built for
    another quorum. Every group asks after building for the quorum before, so within one Lighthouse this is only so
    in a quorum whose number changed, which torchft rebuilds anyway."""
    try:
        peers = [json.loads(h) for h in handles]
        want = _key(quorum_id, peers)
        return any(peer.get(BUILT_FOR) != want for peer in peers)
    except (ValueError, AttributeError):
        return False  # handles not of this module's making: torchft's own rule alone


class QuorumClient:
    """torchft's ManagerClient, with one change to what its quorum answers: a quorum whose number is the one the
    Manager has, but that some group's process group was not built for, makes the Manager build it again (its
    quorum id set to -1, torchft's own "none yet"), so every group of that quorum builds the same new one.

    A quorum is answered every step, with the same handles while nothing changes: the last quorum found built for
    is remembered, so a step parses no handle."""

    def __init__(self, client: Any, manager: Any) -> None:
        self._client, self._manager = client, manager
        self._built: tuple[int, tuple[str, ...]] | None = None  # the last (quorum id, handles) every group built for

    def _quorum(self, *args: Any, **kwargs: Any) -> Any:
        quorum = self._client._quorum(*args, **kwargs)
        if quorum.quorum_id == self._manager._quorum_id:
            seen = (quorum.quorum_id, tuple(quorum.reconfigure_handles))
            if seen != self._built:
                if built_for_another(list(seen[1]), quorum.quorum_id):
                    self._manager._quorum_id = -1
                else:
                    self._built = seen
        return quorum

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def quorum_retries(quorum_timeout: timedelta) -> int:
    """torchft waits the quorum timeout / (retries + 1) after a refused quorum call: about a second."""
    return max(1, int(quorum_timeout.total_seconds()))


class GroupManager(Manager):
    """torchft's Manager, its quorums checked against the builds the groups report (QuorumClient)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._client = QuorumClient(self._client, self)  # type: ignore[has-type]


class AdvertisedGloo(AdvertisedHandle, ProcessGroupGloo):
    pass


class AdvertisedNCCL(AdvertisedHandle, ProcessGroupNCCL):
    pass


def process_group(ft: ReplicaGroupEnv, device: torch.device) -> Any:
    """The group's torchft process group, NCCL on a GPU and gloo on a CPU, its handle naming the pod's address."""
    pg = AdvertisedNCCL(timeout=ft.timeout) if device.type == "cuda" else AdvertisedGloo(timeout=ft.timeout)
    pg.advertise = ft.advertise or ""
    return pg


def advertised(ft: ReplicaGroupEnv) -> dict[str, Any]:
    """The Manager's arguments that make every address it gives its peers the pod's IP: its own server, the group's
    store (torchrun's standalone store listens on every interface, but MASTER_ADDR says localhost) and the heal
    transport. Nothing when the pod's IP is unknown (a run outside Kubernetes: one machine, defaults work)."""
    if not ft.advertise:
        return {}
    return {
        "hostname": _host(ft.advertise),
        "store_addr": ft.advertise,
        "checkpoint_transport": AdvertisedHTTPTransport(ft.advertise, timeout=ft.timeout, num_chunks=0),
    }


class GroupAveragingDDP(TorchftDDP):
    """torchft's DDP, plus the average inside the pod before the average across groups. (No postponed annotations
    in this module: DDP checks the hook's `bucket` annotation against the class itself.)"""

    @staticmethod
    def _comm_hook(state: Manager, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        if dist.is_initialized() and dist.get_world_size() > 1:
            buffer = bucket.buffer()
            dist.all_reduce(buffer)  # a sum: gloo has no average
            buffer.div_(dist.get_world_size())
        return TorchftDDP._comm_hook(state, bucket)


class StepOptimizer(OptimizerWrapper):
    """torchft's wrapper, whose zero_grad only clears: the trainer starts each step's quorum itself, at the top of
    the step (ReplicaGroups.start_step), and clears gradients after the step, where a quorum would be one too many
    (and, after the last step, one the finished peers never join)."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optim.zero_grad(set_to_none)


class ReplicaGroups:
    def __init__(self, ft_env: ReplicaGroupEnv, env: DistEnv):
        self.ft_env, self.env = ft_env, env
        self.trainer: GroupTrainer | None = None
        self.manager: Manager | None = None
        self.healed = False  # the last quorum moved this group's state to a live peer's
        self.healed_from: int | None = None  # that peer's replica group
        self.quorum_ready = False  # join()'s quorum serves the first step
        self.heals: Any = None  # the metrics' counter and gauge, once wrap() registered them
        self.groups: Any = None
        self.participants = 0  # replica groups in the last quorum
        self.uncommitted = 0  # steps in a row the groups did not commit
        self.watch: LighthouseWatch | None = None  # group rank 0's, once wrap() built the Manager

    def data_shard(self) -> tuple[int, int]:
        """(ranks over all groups, this rank's place among them): the global batch B is split across both."""
        w = self.env.world_size
        return self.ft_env.num_replica_groups * w, self.ft_env.replica_group * w + self.env.rank

    def wrap(
        self, trainer: GroupTrainer
    ) -> tuple[TorchftDDP, Callable[..., Any], torch.optim.Optimizer, torch.optim.Optimizer]:
        """The Manager, the model in torchft's DDP and the optimizer in its wrapper; (ddp, callable model, the
        wrapper the trainer steps, the optimizer inside it that checkpoints and heals read and write)."""
        from .ddp_model import use_sync_batchnorm
        from .device_options import use_fused

        self.trainer = trainer
        cfg, device, ft = trainer.cfg, trainer.device, self.ft_env
        self.groups, self.heals = trainer.metrics.add_replica_group_series()
        self.manager = GroupManager(
            pg=process_group(ft, device),
            load_state_dict=self._load_from_peer,
            state_dict=self._state_for_peer,
            min_replica_size=ft.min_replicas,
            use_async_quorum=False,
            init_sync=False,
            timeout=ft.timeout,
            quorum_timeout=ft.quorum_timeout,
            # A Lighthouse that ended (its pod deleted or evicted, its process killed) refuses the quorum call at
            # once: torchft then asks again on a new connection, about once a second within the quorum timeout, and
            # finds the Lighthouse the operator made in its place. (One gone silent holds the call to the quorum
            # timeout: the process ends.) TORCHFT_QUORUM_RETRIES in the env wins.
            quorum_retries=quorum_retries(ft.quorum_timeout),
            connect_timeout=ft.connect_timeout,
            rank=self.env.rank,
            world_size=self.env.world_size,
            lighthouse_addr=ft.lighthouse,
            **advertised(ft),
            # The Manager takes the trailing digits as the group's index (its global rank in torchft's logs).
            replica_id=f"{trainer.who.job}_group_{ft.replica_group}",
        )
        self.watch = self._watch_lighthouse(trainer)
        # The quorum retries (a Lighthouse that ended) and the watch (one gone silent) follow a Lighthouse the
        # operator makes again: it may then replace the Lighthouse alone, the groups training on (metrics.py).
        trainer.metrics.add_capability(LIGHTHOUSE_RECONNECT)
        ignored = ignored_ddp_options(cfg.ddp)
        if ignored:
            trainer._warn(f"{' and '.join(ignored)} ignored: torchft replica groups reduce gradients in their own hook")
        model = trainer.workload.model
        sync_bn, warning = use_sync_batchnorm(cfg.ddp.sync_batchnorm, device)
        if warning:
            trainer._warn(warning)
        if sync_bn:
            model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        model.to(device)
        ddp = GroupAveragingDDP(
            self.manager,
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            bucket_cap_mb=cfg.ddp.bucket_cap_mb,
            gradient_as_bucket_view=cfg.ddp.gradient_as_bucket_view,
        )
        inner = make_optimizer(ddp, cfg.train, use_fused(cfg.train.fused, device))
        callable_model = torch.compile(ddp) if trainer.compiled else ddp
        return ddp, callable_model, StepOptimizer(self.manager, inner), inner

    def _watch_lighthouse(self, trainer: GroupTrainer) -> LighthouseWatch | None:
        """In the group's rank 0, which holds the Manager's server and its connection to the Lighthouse: a
        Lighthouse made again at another address under the same name (its node lost) is followed
        (lighthouse_watch.py)."""
        target = lighthouse_target(self.ft_env.lighthouse)
        if self.env.rank != 0 or target is None:
            return None
        host, port = target

        def say(old: list[str], new: list[str], n: int) -> None:
            emit(lighthouse_moved_line(trainer.who, host, old, new, n))

        return LighthouseWatch(host, port, say).start()

    @property
    def _manager(self) -> Manager:
        assert self.manager is not None, "wrap() builds the Manager"
        return self.manager

    @property
    def _trainer(self) -> GroupTrainer:
        assert self.trainer is not None, "wrap() is given the trainer"
        return self.trainer

    def join(self) -> bool:
        """The first quorum, before any checkpoint is read. True when this group healed from a live peer (it has
        its state now and must not read a checkpoint); False when no peer is ahead of step 0."""
        self._quorum()
        self.quorum_ready = True
        return self.healed

    def start_step(self) -> bool:
        """The quorum of the step about to run. True when this group healed in it (its step moved: the trainer
        restarts its data at the new step)."""
        if self.quorum_ready:
            self.quorum_ready = False
            return self.healed
        self._quorum()
        return self.healed

    def _quorum(self) -> None:
        started = time.monotonic()
        self.healed = False
        self._manager.start_quorum()  # synchronous: a heal has been fetched and applied when it returns
        t, participants = self._trainer, self._manager.num_participants()
        self.groups.set(participants)
        if t.talks and participants != self.participants:
            emit(quorum_line(t.who, participants, self.ft_env.num_replica_groups, self._manager.current_step()))
        self.participants = participants
        if self.healed and t.talks:
            emit(healed_line(t.who, self.healed_from or 0, t.step, t.samples, time.monotonic() - started))

    def after_step(self) -> bool:
        """Take the step the groups agreed on (it advances only when every group's step went through). True when
        it did not advance by one: the trainer draws its data again from the step it is at."""
        t, m = self._trainer, self._manager
        was = t.step
        t.step = m.current_step()
        t.samples = m.batches_committed() * self.group_batch
        t.position = self.position(t.step)
        committed = t.step == was + 1
        self.uncommitted = 0 if committed else self.uncommitted + 1
        # Once per streak, then every 100: with fewer groups than TORCHFT_MIN_REPLICAS every step fails, ~100 a second.
        if self.uncommitted % 100 == 1 and t.talks:
            # fp16's scaler skips the optimizer's step on an overflow, and with it the commit.
            overflow = ", or fp16 skipped it for an overflow" if t.scaler.is_enabled() else ""
            t._warn(
                f"step {was + 1} not committed by every replica group (a peer failed or left, or fewer than "
                f"{self.ft_env.min_replicas} groups{overflow}): running it again ({self.uncommitted} in a row)"
            )
        return not committed

    @property
    def group_batch(self) -> int:
        """The samples one group trains on per step: B / N (B divides evenly, checked at start)."""
        return self._trainer.global_batch // self.ft_env.num_replica_groups

    def position(self, step: int) -> SamplePosition:
        """For the progress line's epoch: where step `step` is in the data, in whole global batches."""
        t = self._trainer
        epoch, index = data_position(step, steps_per_epoch(t.dataset_len // self.data_shard()[0], t.rank_batch))
        return SamplePosition(epoch, index * t.global_batch)

    def batch_sampler(self, dataset: Any) -> ReplicaBatchSampler:
        t = self._trainer
        return ReplicaBatchSampler(
            dataset,
            self.ft_env.replica_group,
            self.ft_env.num_replica_groups,
            self.env.rank,
            self.env.world_size,
            t.rank_batch,
            t.step,
            shuffle=t.cfg.data.shuffle,
            seed=t.cfg.train.seed,
        )

    def writes_checkpoints(self) -> bool:
        """One group writes: rank 0 of the last quorum (the same answer on every rank of a group)."""
        return self._manager.participating_rank() == 0

    def checkpoint_meta(self) -> dict[str, int]:
        return {BATCHES_COMMITTED_KEY: self._manager.batches_committed()}

    def resumed(self, state: dict) -> None:
        """A checkpoint was read (no live peer was ahead): the Manager goes on from its step."""
        step = int(state["step"])
        committed = state.get(BATCHES_COMMITTED_KEY)
        if committed is None:  # a checkpoint of the plain DDP path: every group was there for every step
            committed = step * self.ft_env.num_replica_groups
        self._manager.load_state_dict({"step": step, "batches_committed": int(committed)})

    def _state_for_peer(self) -> dict[str, Any]:
        """What a healing group takes from this one. Called on the Manager's quorum thread while this group's
        main thread is between steps or in its forward and backward, which leave weights and optimizer alone."""
        t = self._trainer
        return {
            "model": t.ddp.module.state_dict(),
            "optimizer": t.base_optimizer.state_dict(),
            "trainer": {
                "replica_group": self.ft_env.replica_group,
                "scheduler": t.schedule.state_dict(),
                # fp16: every group must scale its loss alike, or the averaged gradients mix scales.
                "scaler": t.scaler.state_dict(),
            },
        }

    def _load_from_peer(self, state: dict[str, Any]) -> None:
        """A heal: the Manager fetched a live peer's state (its step is set already) and applies it here, on the
        main thread, before this group's next forward pass."""
        t, m = self._trainer, self._manager
        t.ddp.module.load_state_dict(state["model"])
        t.base_optimizer.load_state_dict(state["optimizer"])
        if state["trainer"].get("scaler"):
            t.scaler.load_state_dict(state["trainer"]["scaler"])
        t.step = m.current_step()
        t.samples = m.batches_committed() * self.group_batch
        t.position = self.position(t.step)
        t.schedule = t.schedule.continued_from(state["trainer"]["scheduler"], t.step)
        seed_everything(rank_seed(t.cfg.train.seed, self.data_shard()[1], t.step))  # a stream of this rank's own
        self.healed, self.healed_from = True, int(state["trainer"]["replica_group"])
        self.heals.inc()
        t.metrics.step.set(t.step)
        t.metrics.run_samples.set(t.samples)

    def shutdown(self) -> None:
        if self.watch is not None:
            self.watch.stop()
        if self.manager is not None:
            self.manager.shutdown(wait=False)
