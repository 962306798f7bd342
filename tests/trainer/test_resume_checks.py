"""What a checkpoint must share with the run that resumes it (its shape, its model's and optimizer's entries), and
the per-rank seeds."""

import pytest

from ddp_trainer.preemption import PreemptionFlag, StepVote, Verdict
from ddp_trainer.resume_checks import (
    CheckpointMismatch,
    RunShape,
    check_keys,
    check_resumable,
    differences,
    state_keys,
)
from ddp_trainer.rng_state import rank_seed

HERE = RunShape(workload="digits", dataset_len=1437, fixed_global_batch=96, batch_size_per_rank=32)
PER_RANK = RunShape(workload="digits", dataset_len=1437, fixed_global_batch=0, batch_size_per_rank=32)


def shape(**changed) -> dict:
    return {"shape": {**HERE.state_dict(), **changed}}


CASES = [
    # name, stored checkpoint, the run resuming it, differences
    ("the same shape", shape(), HERE, []),
    ("another workload", shape(workload="gpt"), HERE, ["workload 'gpt' there, 'digits' here (--workload or --entrypoint)"]),
    ("another data set", shape(dataset_len=1000), HERE,
     ["training set length 1000 there, 1437 here (the data set, e.g. --model.train-samples)"]),
    ("another fixed global batch", shape(fixed_global_batch=64), HERE,
     ["fixed global batch 64 there, 96 here (--train.global-batch-size)"]),
    ("a per-rank batch before, a fixed one now", shape(fixed_global_batch=0), HERE,
     ["fixed global batch 0 there, 96 here (--train.global-batch-size)"]),
    ("a fixed global batch ignores the per-rank batch", shape(batch_size_per_rank=16), HERE, []),
    ("another per-rank batch", {"shape": {**PER_RANK.state_dict(), "batch_size_per_rank": 16}}, PER_RANK,
     ["batch per rank 16 there, 32 here (--train.batch-size-per-rank)"]),
    ("several at once", shape(workload="cnn", dataset_len=5), HERE,
     ["workload 'cnn' there, 'digits' here (--workload or --entrypoint)",
      "training set length 5 there, 1437 here (the data set, e.g. --model.train-samples)"]),
    ("before shapes were kept: workload and fixed global batch", {"workload": "digits", "global_batch": 64}, HERE,
     ["fixed global batch 64 there, 96 here (--train.global-batch-size)"]),
    ("before shapes were kept, a per-rank batch: its global batch changes with N", {"workload": "digits",
                                                                                   "global_batch": 64}, PER_RANK, []),
]


@pytest.mark.parametrize("name, stored, current, want", CASES, ids=[c[0] for c in CASES])
def test_differences(name, stored, current, want):
    assert differences(stored, current) == want, name


def test_a_mismatch_is_refused_with_every_difference_and_what_to_do():
    with pytest.raises(CheckpointMismatch) as e:
        check_resumable("/ck/step-000000040.pt", shape(workload="cnn", dataset_len=5), HERE)
    assert str(e.value) == (
        "refusing to resume from /ck/step-000000040.pt, written by a run of another shape: workload 'cnn' there, "
        "'digits' here (--workload or --entrypoint); training set length 5 there, 1437 here (the data set, e.g. "
        "--model.train-samples). Resuming would continue at a data position and step that mean other samples. Run "
        "with the checkpoint's settings, or start afresh with another --checkpoint.dir")
    check_resumable("/ck/step-000000040.pt", shape(), HERE)


MODEL = {"net.0.weight": 0, "net.0.bias": 0}
ADAMW = {"state": {p: {"step": 0, "exp_avg": 0, "exp_avg_sq": 0} for p in MODEL}, "param_groups": [{"lr": 1e-3}]}
SGD = {"state": {p: {"momentum_buffer": 0} for p in MODEL}, "param_groups": [{"lr": 1e-3, "momentum": 0.9}]}
FILE_FORMAT = {"state": {0: {"momentum_buffer": 0}}, "param_groups": []}  # parameter indices, not names

KEY_CASES = [
    # name, model, optimizer, keys
    ("model and optimizer entries, named as DCP flattens them", MODEL, SGD,
     {"model.net.0.weight", "model.net.0.bias", "optim.state.net.0.weight.momentum_buffer",
      "optim.state.net.0.bias.momentum_buffer"}),
    ("the file format's optimizer: parameter indices", {}, FILE_FORMAT, {"optim.state.0.momentum_buffer"}),
    ("no optimizer to compare", MODEL, None, {"model.net.0.weight", "model.net.0.bias"}),
]


@pytest.mark.parametrize("name, model, optimizer, want", KEY_CASES, ids=[c[0] for c in KEY_CASES])
def test_state_keys(name, model, optimizer, want):
    assert state_keys(model, optimizer) == want, name


def test_a_checkpoint_of_another_optimizer_is_refused_naming_a_few_entries_of_each_side():
    with pytest.raises(CheckpointMismatch) as e:
        check_keys("/ck/step-000000060.dcp", state_keys(MODEL, SGD), state_keys(MODEL, ADAMW))
    assert str(e.value) == (
        "refusing to resume from /ck/step-000000060.dcp: its entries do not fit this run's model and optimizer: "
        "missing optim.state.net.0.bias.exp_avg, optim.state.net.0.bias.exp_avg_sq, optim.state.net.0.bias.step, "
        "optim.state.net.0.weight.exp_avg and 2 more; unexpected optim.state.net.0.bias.momentum_buffer, "
        "optim.state.net.0.weight.momentum_buffer. Was --train.optimizer or the model changed? Run with the "
        "checkpoint's settings, or start afresh with another --checkpoint.dir")
    with pytest.raises(CheckpointMismatch, match="entries do not fit.*: unexpected model.net.1.weight. Was"):
        check_keys("/ck/step-000000060.pt", state_keys({**MODEL, "net.1.weight": 0}, None), state_keys(MODEL, None))
    check_keys("/ck/step-000000060.pt", state_keys(MODEL, SGD), state_keys(MODEL, SGD))


def test_rank_seeds_never_coincide():
    """The old `seed + 7919 * rank + step` gave rank 1 at step 0 the seed of rank 0 resumed at step 7919."""
    seeds = {rank_seed(0, rank, step) for rank in range(8) for step in (0, 1, 7919, 15838)}
    assert len(seeds) == 32
    assert rank_seed(0, 1, 0) != rank_seed(0, 0, 7919)
    assert rank_seed(3, 1, 5) == rank_seed(3, 1, 5)


def test_a_vote_without_a_group_is_this_process_own():
    flag = PreemptionFlag()
    vote = StepVote(flag)
    assert vote.step() == Verdict() and vote.step(ask_to_save=True) == Verdict(save=True)
    flag.requested = True
    assert vote.step() == Verdict(stop=True) and vote.settle() == Verdict()
