"""The B/N split with remainders, the batch plan, the LR rule, the sample position, and the sampler's world-size-free order."""

import pytest

from ddp_trainer.batching import (SamplePosition, check_accumulation, global_batch_size, loss_scale, plan_batches,
                                  rank_slice, split_sizes)
from ddp_trainer.lr_schedule import LearningRateSchedule, peak_lr_for_batch, reference_batch, scaling_rule
from ddp_trainer.sampler import GlobalBatchSampler


@pytest.mark.parametrize("total, parts, want", [
    (8, 2, [4, 4]), (10, 4, [3, 3, 2, 2]), (7, 3, [3, 2, 2]), (3, 3, [1, 1, 1]), (5, 1, [5]), (2, 4, [1, 1, 0, 0]),
])
def test_split_sizes(total, parts, want):
    assert split_sizes(total, parts) == want
    assert sum(split_sizes(total, parts)) == total


def test_rank_slices_tile_the_global_batch():
    slices = [rank_slice(10, 4, r) for r in range(4)]
    assert [(s.start, s.stop) for s in slices] == [(0, 3), (3, 6), (6, 8), (8, 10)]


@pytest.mark.parametrize("world, per_rank, fixed, want", [(2, 32, 0, 64), (3, 32, 0, 96), (3, 32, 10, 10)])
def test_global_batch(world, per_rank, fixed, want):
    assert global_batch_size(world, per_rank, fixed) == want


def test_global_batch_smaller_than_world_is_an_error():
    with pytest.raises(ValueError, match="global batch 3 is smaller than the world size 4"):
        global_batch_size(4, 32, 3)


def test_split_into_zero_parts_is_an_error():
    with pytest.raises(ValueError, match="cannot split into 0 parts"):
        split_sizes(4, 0)


def test_loss_scale_gives_the_global_mean_after_ddp_averaging():
    # ranks hold 3,3,2,2 of B=10; each sums its losses x N/B; DDP divides the sum of ranks by N
    per_sample = list(range(10))
    ranks = [per_sample[rank_slice(10, 4, r)] for r in range(4)]
    averaged = sum(sum(share) * loss_scale(4, 10) for share in ranks) / 4
    assert averaged == pytest.approx(sum(per_sample) / 10)


@pytest.mark.parametrize("name, batch, reference, rule, want", [
    ("linear: twice the batch, twice the LR", 64, 32, "linear", 0.2),
    ("sqrt: four times the batch, twice the LR", 128, 32, "sqrt", 0.2),
    ("none: as given", 128, 32, "none", 0.1),
    ("at the reference batch: as given", 96, 96, "linear", 0.1),
])
def test_the_peak_lr_follows_the_global_batch(name, batch, reference, rule, want):
    assert peak_lr_for_batch(0.1, batch, reference, rule) == pytest.approx(want), name


@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_a_resize_at_a_fixed_global_batch_keeps_the_lr(world):
    """The rule's point: the LR is a function of B only, so the world size cannot move it. (The old rule
    multiplied by N: a shrink from 2 to 1 at B=96 halved the LR with the same averaged gradient.)"""
    batch = global_batch_size(world, 32, 96)
    reference = reference_batch(0, 96, 32)
    assert [peak_lr_for_batch(0.1, batch, reference, rule) for rule in ("linear", "sqrt", "none")] == [0.1] * 3


def test_the_reference_batch():
    assert reference_batch(0, 96, 32) == 96  # a fixed global batch: --train.lr is used as given
    assert reference_batch(0, 0, 32) == 32  # a per-rank batch: --train.lr is one rank's LR
    assert reference_batch(256, 96, 32) == 256  # set explicitly


def test_auto_scaling_is_linear_for_sgd_and_sqrt_for_adamw():
    assert (scaling_rule("auto", "sgd"), scaling_rule("auto", "adamw"), scaling_rule("none", "sgd")) == \
        ("linear", "sqrt", "none")


def test_unknown_lr_scaling_is_an_error():
    with pytest.raises(ValueError, match="unknown lr scaling 'cubic'"):
        peak_lr_for_batch(0.1, 64, 32, "cubic")


PLAN_CASES = [
    # name, global batch, world size, configured accumulation, micro-batch limit, (rank 0 share, accum, micro-batch,
    # limit recorded)
    ("no limit yet: the plan's own micro-batch becomes the limit", 96, 2, 1, 0, (48, 1, 48, 48)),
    ("shrink 2 -> 1 at fixed B: twice the micro-batches, same size", 96, 1, 1, 48, (96, 2, 48, 48)),
    ("grow back 1 -> 2: the configured accumulation again", 96, 2, 1, 48, (48, 1, 48, 48)),
    ("shrink 3 -> 2 with unequal shares: never above the limit", 100, 2, 1, 34, (50, 2, 25, 34)),
    ("configured accumulation is a floor", 96, 2, 4, 48, (48, 4, 12, 48)),
    ("a per-rank batch: the share never grows, nor does the accumulation", 64, 2, 1, 32, (32, 1, 32, 32)),
]


@pytest.mark.parametrize("name, batch, world, accum, limit, want", PLAN_CASES, ids=[c[0] for c in PLAN_CASES])
def test_plan_batches(name, batch, world, accum, limit, want):
    plan = plan_batches(batch, world, accum, limit)
    assert (plan.rank_batch(0), plan.accum_steps, plan.largest_micro_batch, plan.micro_batch_limit) == want, name
    assert max(split_sizes(plan.rank_batch(0), plan.accum_steps)) <= plan.micro_batch_limit


def test_a_limit_the_smallest_share_cannot_meet_is_an_error():
    with pytest.raises(ValueError, match="a micro-batch of at most 1 samples needs 3 micro-batches per step, but "
                                         "some ranks get only 2 samples of the global batch 5 at world size 2; "
                                         "raise --train.micro-batch-size"):
        plan_batches(5, 2, 1, 1)  # shares 3 and 2


def test_schedule_warms_up_then_decays_to_the_floor():
    s = LearningRateSchedule(peak_lr=1.0, total_steps=10, warmup_steps=2, decay="cosine", min_lr_ratio=0.1)
    assert [round(s.lr_at(i), 3) for i in (0, 1, 2)] == [0.5, 1.0, 1.0]
    assert s.lr_at(10) == pytest.approx(0.1)
    assert LearningRateSchedule(peak_lr=0.3, total_steps=5, decay="constant").lr_at(4) == 0.3


def cosine(total: int, **anchor) -> LearningRateSchedule:
    return LearningRateSchedule(peak_lr=1.0, total_steps=total, warmup_steps=10, min_lr_ratio=0.1, **anchor)


def test_a_changed_total_on_resume_keeps_the_lr_continuous_and_ends_at_the_floor():
    first = cosine(100)
    resumed = cosine(200).continued_from(first.state_dict(), 40)
    assert resumed.lr_at(40) == pytest.approx(first.lr_at(40))
    assert cosine(200).lr_at(40) > first.lr_at(40) + 0.1, "without the anchor the LR would jump back up"
    lrs = [resumed.lr_at(step) for step in range(40, 201)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:])) and lrs[-1] == pytest.approx(0.1)
    # A shorter total: still continuous, reaching the floor sooner.
    shorter = cosine(60).continued_from(first.state_dict(), 40)
    assert shorter.lr_at(40) == pytest.approx(first.lr_at(40)) and shorter.lr_at(60) == pytest.approx(0.1)


def test_the_anchor_is_kept_across_resumes_at_the_same_total():
    resumed = cosine(200).continued_from(cosine(100).state_dict(), 40)
    again = cosine(200).continued_from(resumed.state_dict(), 120)
    assert [again.lr_at(s) for s in (120, 150, 200)] == [resumed.lr_at(s) for s in (120, 150, 200)]
    third = cosine(300).continued_from(again.state_dict(), 150)
    assert third.lr_at(150) == pytest.approx(resumed.lr_at(150)) and third.lr_at(300) == pytest.approx(0.1)


def test_same_total_or_within_warm_up_changes_nothing():
    first = cosine(100)
    assert cosine(100).continued_from(first.state_dict(), 40) == first
    early = cosine(200).continued_from(first.state_dict(), 5)  # still warming up: the cosine has not begun
    assert [early.lr_at(s) for s in (5, 10, 200)] == [cosine(200).lr_at(s) for s in (5, 10, 200)]


def test_a_checkpoint_from_before_anchors_resumes_as_it_was_written():
    old = {"peak_lr": 1.0, "total_steps": 100, "warmup_steps": 10, "decay": "cosine", "min_lr_ratio": 0.1}
    assert cosine(200).continued_from(old, 40).lr_at(40) == pytest.approx(cosine(100).lr_at(40))


def test_sample_position_drops_the_tail_of_an_epoch():
    p = SamplePosition()
    for _ in range(3):
        p = p.after_batch(30, 100)
    assert p == SamplePosition(0, 90)
    assert p.after_batch(30, 100) == SamplePosition(1, 30)  # 10 left over: skipped, as drop_last does


def test_batch_larger_than_data_set_is_an_error():
    with pytest.raises(ValueError, match="global batch 200 is larger than the data set \\(100 samples\\)"):
        SamplePosition().after_batch(200, 100)


def global_order(world: int, batch: int, steps: int, start=SamplePosition(), n=50):
    samplers = [iter(GlobalBatchSampler(range(n), world, r, batch, start, seed=3)) for r in range(world)]
    return [[i for s in samplers for i in next(s)] for _ in range(steps)]


def test_sampler_order_is_the_same_at_any_world_size():
    reference = global_order(1, 12, 9)  # crosses 2 epoch boundaries (50 // 12 = 4 steps per epoch)
    assert global_order(2, 12, 9) == reference
    assert global_order(5, 12, 9) == reference  # 3,3,2,2,2


def test_sampler_reshuffles_each_epoch_and_covers_it():
    order = global_order(2, 10, 10)
    assert sorted(i for step in order[:5] for i in step) == list(range(50))
    assert order[:5] != order[5:]


def test_sampler_resumes_mid_epoch_at_another_world_size():
    straight = global_order(2, 12, 7)
    position = SamplePosition()
    for _ in range(3):
        position = position.after_batch(12, 50)
    assert global_order(3, 12, 4, start=position) == straight[3:]


def test_accumulation_needs_a_sample_per_micro_batch_on_every_rank():
    check_accumulation(12, 2, 6)
    with pytest.raises(ValueError, match="each rank gets at least 2 samples per step, fewer than "
                                         "--train.grad-accum-steps=3 micro-batches"):
        check_accumulation(10, 4, 3)  # shares 3,3,2,2
