"""How long a dcp save blocks the training loop (DcpStore.save's own time), async against sync, on the same state
in the same run: the part of checkpoint_stall.py's stall that is the step's wait, without the background writes'
contention with the steps beside them. Each rank holds the same state (DDP's replicated weights and AdamW's two
moments); a save's background write is waited for outside the timing, and the first async save (which allocates
the staging buffers) is reported apart from the later ones (which reuse them).

    torchrun --standalone --nproc-per-node 2 bench/checkpoint_save_block.py --mb 160 --saves 4"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time

import torch
import torch.distributed as dist

from ddp_trainer.checkpoint_dcp import DcpStore


def build_state(mb: int, device: torch.device) -> dict:
    """A model's weights and AdamW's moments, in 8 tensors each, `mb` MiB in all."""
    numel = mb * 2**20 // 4 // 3 // 8
    weights = {f"layer{i}.weight": torch.randn(numel, device=device) for i in range(8)}
    moments = {k: {"exp_avg": torch.zeros_like(w), "exp_avg_sq": torch.zeros_like(w)} for k, w in weights.items()}
    return {"model": weights, "optim": {"state": moments}, "meta": {"step": 0}}


def timed_save(store: DcpStore, step: int, state: dict) -> float:
    state["meta"]["step"] = step
    dist.barrier()
    started = time.perf_counter()
    store.save(step, state)
    seconds = time.perf_counter() - started
    store.wait()  # outside the timing: the background write, which a step overlaps
    for w in state["model"].values():
        w.add_(1.0)  # a training step between saves
    return seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=160)
    p.add_argument("--saves", type=int, default=4)
    p.add_argument("--out", default="")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    state = build_state(args.mb, device)
    box = [tempfile.mkdtemp(prefix="ckblock-") if rank == 0 else ""]
    dist.broadcast_object_list(box, src=0)
    stores = {
        "sync": DcpStore(f"{box[0]}/sync", keep=1, asynchronous=False, rank=rank),
        "async": DcpStore(f"{box[0]}/async", keep=1, asynchronous=True, rank=rank),
    }
    times: dict[str, list[float]] = {m: [] for m in stores}
    for n in range(args.saves):  # the modes alternate, so a load change on a shared VM does not favour one
        for mode in stores if n % 2 == 0 else reversed(stores):
            times[mode].append(timed_save(stores[mode], 10 * (n + 1), state))
    sync = statistics.median(times["sync"])
    later = statistics.median(times["async"][1:]) if len(times["async"]) > 1 else times["async"][0]
    result = {
        "device": str(device),
        "world_size": dist.get_world_size(),
        "state_mb": args.mb,
        "sync_seconds": sync,
        "async_first_seconds": times["async"][0],
        "async_later_seconds": later,
        "async_vs_sync": later / sync,
        "times": times,
    }
    if rank == 0:
        print(json.dumps(result, indent=2))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f, indent=2)
        shutil.rmtree(box[0], ignore_errors=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
