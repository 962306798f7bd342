"""What a checkpoint must share with the run that resumes it. A checkpoint of another workload, data set or batch
rule would otherwise load (or half-load) and train on quietly: its data position is an offset into another
permutation, and its step count means other samples. Refusing names each difference and how to go on.

The same holds for its entries and their shapes: a checkpoint whose model or optimizer entries are not this run's
(another --train.optimizer, a changed model, another width) is another run's, not a damaged one. Taking it for
damaged skipped it, then every older one, and the run began again at step 0 (or, in the dcp format, stopped with 66,
"unreadable", naming no cause)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch


class CheckpointMismatch(ValueError):
    """The newest checkpoint was written by a run of another shape, model or optimizer; a retry would meet it again."""


@dataclass(frozen=True)
class RunShape:
    workload: str
    dataset_len: int  # samples in the training set
    fixed_global_batch: int  # --train.global-batch-size; 0: the global batch is the per-rank batch x world size
    batch_size_per_rank: int  # what sets the global batch when fixed_global_batch is 0

    def state_dict(self) -> dict:
        return asdict(self)


# (field, what the message calls it, the flag that sets it)
_CHECKED = (
    ("workload", "workload", "--workload or --entrypoint"),
    ("dataset_len", "training set length", "the data set, e.g. --model.train-samples"),
    ("fixed_global_batch", "fixed global batch", "--train.global-batch-size"),
    ("batch_size_per_rank", "batch per rank", "--train.batch-size-per-rank"),
)


def differences(stored: dict, current: RunShape) -> list[str]:
    """Each way `stored` (a checkpoint's "shape", or its top-level keys before shapes were kept) differs."""
    shape = dict(stored.get("shape") or _shape_before_shapes(stored, current))
    if shape.get("fixed_global_batch", 0) > 0 or current.fixed_global_batch > 0:
        shape.pop("batch_size_per_rank", None)  # a fixed global batch does not depend on it
    now = current.state_dict()
    return [
        f"{words} {shape[name]!r} there, {now[name]!r} here ({flag})"
        for name, words, flag in _CHECKED
        if shape.get(name) is not None and shape[name] != now[name]
    ]


def _shape_before_shapes(stored: dict, current: RunShape) -> dict:
    """A checkpoint written before shapes were kept has its workload's name and its global batch, which is the
    fixed one when the run fixes it (a per-rank batch's global batch changes with the world size)."""
    shape = {"workload": stored.get("workload")}
    if current.fixed_global_batch > 0:
        shape["fixed_global_batch"] = stored.get("global_batch")
    return shape


def check_resumable(checkpoint: str, stored: dict, current: RunShape) -> None:
    found = differences(stored, current)
    if found:
        raise CheckpointMismatch(
            f"refusing to resume from {checkpoint}, written by a run of another shape: {'; '.join(found)}. "
            "Resuming would continue at a data position and step that mean other samples. Run with the "
            "checkpoint's settings, or start afresh with another --checkpoint.dir"
        )


SHOWN_KEYS = 4  # a changed optimizer differs in every parameter's entries: name a few, count the rest


def state_keys(model: dict, optimizer: dict | None) -> set[str]:
    """The entries a model's and an optimizer's state dicts hold, named as DCP flattens them ("model.net.0.weight",
    "optim.state.net.0.weight.exp_avg"; the file format's optimizer has parameter indices where DCP has names).
    Not the optimizer's param_groups: their hyperparameter names change with torch versions, not between runs."""
    keys = {f"model.{name}" for name in model}
    for param, entries in ((optimizer or {}).get("state") or {}).items():
        keys.update(f"optim.state.{param}.{entry}" for entry in entries)
    return keys


def check_keys(checkpoint: str, stored: set[str], wanted: set[str]) -> None:
    """Refuse a checkpoint whose entries are not this run's model's and optimizer's (`stored`, `wanted`: state_keys)."""
    missing, unexpected = sorted(wanted - stored), sorted(stored - wanted)
    if not missing and not unexpected:
        return
    found = [f"{words} {_few(keys)}" for words, keys in (("missing", missing), ("unexpected", unexpected)) if keys]
    raise CheckpointMismatch(
        f"refusing to resume from {checkpoint}: its entries do not fit this run's model and optimizer: "
        f"{'; '.join(found)}. Was --train.optimizer or the model changed? Run with the checkpoint's settings, or "
        "start afresh with another --checkpoint.dir"
    )


def state_shapes(model: dict, optimizer: dict | None) -> dict[str, tuple[int, ...]]:
    """The shape of each tensor state_keys names."""
    shapes = {f"model.{name}": tuple(t.shape) for name, t in model.items() if isinstance(t, torch.Tensor)}
    for param, entries in ((optimizer or {}).get("state") or {}).items():
        for entry, t in entries.items():
            if isinstance(t, torch.Tensor):
                shapes[f"optim.state.{param}.{entry}"] = tuple(t.shape)
    return shapes


def check_shapes(checkpoint: str, stored: dict[str, tuple[int, ...]], wanted: dict[str, tuple[int, ...]]) -> None:
    """Refuse a checkpoint whose entries are this run's but their tensors' shapes are not (another width, sequence
    length or vocabulary): another run's model, not a damaged checkpoint. Loading it failed, it was skipped as
    unreadable, and the run stopped with 66 naming no cause."""
    other = sorted(k for k in stored.keys() & wanted.keys() if tuple(stored[k]) != tuple(wanted[k]))
    if not other:
        return
    shown = [f"{k} {list(stored[k])} there, {list(wanted[k])} here" for k in other[:SHOWN_KEYS]]
    more = f" and {len(other) - SHOWN_KEYS} more" if len(other) > SHOWN_KEYS else ""
    raise CheckpointMismatch(
        f"refusing to resume from {checkpoint}: its tensors have other shapes than this run's model and optimizer: "
        f"{'; '.join(shown)}{more}. Was the model changed (--model.width, --model.seq-len, --model.vocab-size, "
        "--model.preset)? Run with the checkpoint's settings, or start afresh with another --checkpoint.dir"
    )


def _few(keys: list[str]) -> str:
    shown = ", ".join(keys[:SHOWN_KEYS])
    return shown if len(keys) <= SHOWN_KEYS else f"{shown} and {len(keys) - SHOWN_KEYS} more"
