"""RNG state as plain tensors and tuples, so checkpoints load with torch.load(weights_only=True). Each rank has a
stream of its own (dropout, augmentation), saved per rank in every checkpoint and restored by the same rank."""

from __future__ import annotations

import hashlib
import random
from typing import cast

import numpy as np
import torch


def capture_rng() -> dict:
    # legacy=True (the default) returns the MT19937 tuple; the dict form is for other bit generators.
    kind, keys, pos, has_gauss, cached = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state())
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


def rank_seed(seed: int, rank: int, step: int) -> int:
    """A seed for (run seed, rank, step) that no other pair shares. `seed + 7919 * rank + step` gave rank 1 at step 0
    the stream rank 0 was reseeded to at step 7919."""
    digest = hashlib.blake2b(f"{seed}/{rank}/{step}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")
