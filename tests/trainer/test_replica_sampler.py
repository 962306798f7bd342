"""torchft replica groups' data: at step s the ranks of all groups together take the same B samples that one DDP
group's GlobalBatchSampler gives at step s, each rank an equal share, and a sampler started at step s (a healed or
resumed group) goes on where an uninterrupted one is."""

from itertools import islice

import pytest
import torch

from ddp_trainer.batching import SamplePosition
from ddp_trainer.config import DDPConfig
from ddp_trainer.replica_groups import ignored_ddp_options
from ddp_trainer.replica_sampler import ReplicaBatchSampler, data_position, steps_per_epoch
from ddp_trainer.sampler import GlobalBatchSampler


class Indexed(torch.utils.data.Dataset):
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return i


def replica_batches(n, groups, world, batch, start_step, steps, shuffle=True):
    """Per step, the indices of every rank of every group (group-major)."""
    share = batch // (groups * world)
    samplers = [
        ReplicaBatchSampler(Indexed(n), g, groups, r, world, share, start_step, shuffle=shuffle, seed=3)
        for g in range(groups)
        for r in range(world)
    ]
    return [list(step) for step in zip(*(islice(iter(s), steps) for s in samplers), strict=True)]


@pytest.mark.parametrize("groups, world", [(2, 1), (3, 1), (2, 2)])
def test_all_groups_together_take_the_global_batch_of_one_ddp_group(groups, world):
    n, batch, steps = 240, 24, 8  # 10 steps an epoch: the 8 stay in epoch 0
    plain = GlobalBatchSampler(Indexed(n), 1, 0, batch, SamplePosition(), shuffle=True, seed=3)
    for s, (ours, theirs) in enumerate(
        zip(replica_batches(n, groups, world, batch, 0, steps), islice(iter(plain), steps), strict=True)
    ):
        assert all(len(r) == batch // (groups * world) for r in ours), s
        assert sorted(i for r in ours for i in r) == sorted(theirs), s


def test_a_sampler_started_at_a_step_goes_on_where_an_uninterrupted_one_is():
    whole = replica_batches(100, 2, 1, 8, 0, 30)  # 6 steps an epoch: crosses four epoch boundaries
    assert replica_batches(100, 2, 1, 8, 17, 13) == whole[17:]


def test_epochs_permute_anew_and_the_shard_tail_is_dropped():
    assert steps_per_epoch(50, 8) == 6 and data_position(13, 6) == (2, 1)
    first, second = replica_batches(100, 2, 1, 8, 0, 12)[:6], replica_batches(100, 2, 1, 8, 0, 12)[6:]
    assert first != second
    with pytest.raises(ValueError, match="smaller than its batch"):
        steps_per_epoch(3, 4)


@pytest.mark.parametrize(
    "options, want",
    [
        ({}, []),
        ({"static_graph": True}, ["--ddp.static-graph"]),
        ({"comm_hook": "bf16", "static_graph": True}, ["--ddp.static-graph", "--ddp.comm-hook"]),
        ({"sync_batchnorm": True, "compile": True}, []),
    ],
)
def test_ddp_options_torchft_cannot_take_are_named(options, want):
    assert ignored_ddp_options(DDPConfig(**options)) == want
