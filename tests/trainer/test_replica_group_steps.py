"""The trainer's side of a torchft step, in one process against a scripted Manager (torchft's real one needs a
Lighthouse and peers: test_torchft_replica_groups.py runs those). The real ReplicaGroups, torchft's DDP and
OptimizerWrapper, the real loop; only the Manager's answers are scripted: should_commit says no where a test says.

- should_commit runs once per step: checkpoints and resumes read the optimizer inside torchft's wrapper, whose
  step() would ask for a commit of its own (DCP's state-dict helpers step a fresh optimizer to create its state);
- a step not committed runs again on the batch in hand (no new DataLoader), and a retry at a checkpoint's step does
  not write that checkpoint again;
- each group's ranks have streams of their own (seeded by the rank among all groups' ranks);
- a healing group takes fp16's loss scale with the weights."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from ddp_trainer import replica_groups
from ddp_trainer.config import parse_config
from ddp_trainer.distributed_env import DistEnv
from ddp_trainer.fault_tolerance import ReplicaGroupEnv
from ddp_trainer.progress_log import Identity
from ddp_trainer.replica_groups import ReplicaGroups
from ddp_trainer.trainer import Trainer

ONE_RANK = DistEnv(rank=0, world_size=1, local_rank=0, local_world_size=1, restart_count=0)


class DoneWork:
    """An all-reduce across groups that has finished: one group alone, its bucket as it is."""

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor

    def wait(self) -> bool:
        return True

    def get_future(self) -> torch.futures.Future:
        future: torch.futures.Future = torch.futures.Future()
        future.set_result(self.tensor)
        return future


class ScriptedManager:
    """What ReplicaGroups asks of torchft's Manager. `refuse`: step -> how many times should_commit says no there
    (the step the Manager is at: refusing at 10 fails step 11)."""

    def __init__(self, refuse: dict[int, int] | None = None):
        self.step, self.committed = 0, 0
        self.refuse = dict(refuse or {})
        self.asked: list[int] = []  # the Manager's step at each should_commit

    def start_quorum(self) -> None:
        pass

    def should_commit(self) -> bool:
        self.asked.append(self.step)
        if self.refuse.get(self.step, 0) > 0:
            self.refuse[self.step] -= 1
            return False
        self.step, self.committed = self.step + 1, self.committed + 1
        return True

    def allreduce(self, tensor: torch.Tensor) -> DoneWork:
        return DoneWork(tensor)

    def num_participants(self) -> int:
        return 1

    def participating_rank(self) -> int:
        return 0

    def current_step(self) -> int:
        return self.step

    def batches_committed(self) -> int:
        return self.committed

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step, self.committed = state["step"], state["batches_committed"]

    def shutdown(self, wait: bool = False) -> None:
        pass


@pytest.fixture
def one_rank_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture
def scripted(monkeypatch):
    """Every ReplicaGroups built in the test gets the next of these Managers (a list the test fills)."""
    managers: list[ScriptedManager] = []
    monkeypatch.setattr(replica_groups, "GroupManager", lambda **_: managers.pop(0))
    monkeypatch.setattr(replica_groups, "ProcessGroupGloo", lambda **_: None)
    return managers


def build(tmp_path, manager: ScriptedManager, managers: list, *args: str, group: int = 0, groups: int = 1):
    managers.append(manager)
    cfg = parse_config(
        ["--workload", "digits", "--train.global-batch-size", "32", "--metrics.port", "0", "--log.every-steps", "5",
         "--checkpoint.dir", str(tmp_path / "ck"), "--checkpoint.every-steps", "10", *args],
        {},
    )
    ft = ReplicaGroupEnv(lighthouse="http://scripted", replica_group=group, num_replica_groups=groups, min_replicas=1,
                         timeout=timedelta(seconds=5), quorum_timeout=timedelta(seconds=5),
                         connect_timeout=timedelta(seconds=5))
    return Trainer(cfg, ONE_RANK, torch.device("cpu"), Identity("ft", "0", 0, group),
                   replicas=ReplicaGroups(ft, ONE_RANK))


# SGD without momentum keeps no state, so each checkpoint's get_state_dict creates it with a step of its own.
SGD = ("--train.optimizer", "sgd", "--train.momentum", "0")


@pytest.mark.parametrize("fmt", ["dcp", "file"])
def test_should_commit_runs_once_per_step_through_checkpoints_and_a_resume(tmp_path, one_rank_group, scripted, fmt):
    first = ScriptedManager()
    trainer = build(tmp_path, first, scripted, *SGD, "--train.steps", "20", "--checkpoint.format", fmt)
    trainer.resume()
    trainer.train()
    assert first.asked == list(range(20)), "a checkpoint asked the groups to commit (torchft's wrapper was stepped)"
    assert trainer.step == 20

    again = ScriptedManager()
    resumed = build(tmp_path, again, scripted, *SGD, "--train.steps", "25", "--checkpoint.format", fmt)
    assert resumed.resume() and resumed.step == 20
    resumed.train()
    assert again.asked == list(range(20, 25)), "the resume asked the groups to commit"


def test_a_step_not_committed_runs_again_on_its_batch_and_its_checkpoint_is_not_written_again(
    tmp_path, one_rank_group, scripted, monkeypatch
):
    manager = ScriptedManager(refuse={10: 3, 13: 2})  # step 11 fails three times (right after a checkpoint), 14 twice
    trainer = build(tmp_path, manager, scripted, "--train.steps", "20", "--checkpoint.format", "file")
    loaders, batches, saved = [], [], []
    build_loader, forward_backward, save = trainer.data_loader, trainer._forward_backward, trainer.store.save
    monkeypatch.setattr(trainer, "data_loader", lambda: loaders.append(trainer.step) or build_loader())
    monkeypatch.setattr(trainer, "_forward_backward",
                        lambda x, y: batches.append((trainer.step, x.clone())) or forward_backward(x, y))
    monkeypatch.setattr(trainer.store, "save", lambda state: saved.append(state["step"]) or save(state))
    trainer.resume()
    trainer.train()

    assert trainer.step == 20 and len(manager.asked) == 25
    assert loaders == [0], "a step not committed built a new DataLoader"
    retried = [x for step, x in batches if step == 10]
    assert len(retried) == 4 and all(torch.equal(x, retried[0]) for x in retried), "a retry took another batch"
    assert saved == [10, 20], "a retry at step 10 wrote its checkpoint again"


def test_each_group_has_streams_of_its_own(tmp_path, one_rank_group, scripted):
    """Every group has a rank 0: seeded by that alone, the groups would draw the same dropout and augmentation."""
    draws, loader_seeds = [], []
    for group in (0, 1):
        trainer = build(tmp_path / str(group), ScriptedManager(), scripted, group=group, groups=2)
        draws.append(torch.rand(4))
        loader_seeds.append(trainer.data_loader().generator.initial_seed())
    assert not torch.equal(draws[0], draws[1]), "both groups' rank 0 drew the same random numbers"
    assert loader_seeds[0] != loader_seeds[1], "both groups' data loaders had the same seed"


def test_a_healing_group_takes_the_loss_scale_with_the_weights(tmp_path, one_rank_group, scripted):
    """fp16: a group whose loss scale differed from its peers' would add gradients of another scale into the mean."""
    fp16 = ("--ddp.autocast", "fp16")
    live = build(tmp_path / "live", ScriptedManager(), scripted, *fp16, group=0, groups=2)
    live.scaler.scale(torch.ones(()))  # the scale exists from the first step on
    live.scaler.update(new_scale=256.0)
    joining = build(tmp_path / "joining", ScriptedManager(), scripted, *fp16, group=1, groups=2)
    joining.scaler.scale(torch.ones(()))
    assert joining.scaler.get_scale() == 65536.0

    joining.replicas._load_from_peer(live.replicas._state_for_peer())
    assert joining.scaler.get_scale() == 256.0
