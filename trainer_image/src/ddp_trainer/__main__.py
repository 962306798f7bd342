"""`torchrun ... -m ddp_trainer [--workload digits|cnn|gpt | --entrypoint module:function] [--train.steps N ...]`"""

from __future__ import annotations

import dataclasses
import os

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from . import exit_codes, peer_watch
from .checkpoint import CheckpointDiskFull, CheckpointUnreadable
from .config import ConfigError, parse_config
from .device_options import cpu_count, intra_op_threads
from .distributed_env import DistEnv, choose_backend, choose_device, init_process_group
from .fault_tolerance import ReplicaGroupEnv, check_even_split
from .gpu_check import NoUsableGpu, check_gpu
from .process_age import process_age_seconds
from .process_exit import leave, recorded_failure
from .progress_log import Identity, emit, started_line, startup_line
from .resume_checks import CheckpointMismatch


@record  # writes the root cause to TORCHELASTIC_ERROR_FILE, which the operator reads from the termination log
def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse_config(argv)
        replica_env = ReplicaGroupEnv.from_environ()  # torchft replica groups when TORCHFT_LIGHTHOUSE is set
    except ConfigError as e:
        return config_error(e)
    try:
        check_gpu(cfg.device)  # before the group forms: every rank stops here, none waits on a peer
    except NoUsableGpu as e:
        return recorded_failure(e, exit_codes.NO_USABLE_GPU, f"ddp_trainer: {e}")
    env = DistEnv.from_environ()
    who = Identity.from_environ(env.rank)
    if replica_env is not None:
        try:
            check_even_split(cfg, env.world_size, replica_env)
        except ConfigError as e:
            return config_error(e)
        who = dataclasses.replace(who, replica_group=replica_env.replica_group)
    device = choose_device(env)
    threads = intra_op_threads(
        os.environ.get("OMP_NUM_THREADS"), cpu_count(), env.local_world_size, torch.get_num_threads()
    )
    if threads is not None:
        torch.set_num_threads(threads)
    rendezvous_seconds = init_process_group(env, device)
    if env.local_rank == 0 or cfg.log.all_ranks:
        emit(
            started_line(
                who, env.world_size, choose_backend(), str(device), torch.get_num_threads(), rendezvous_seconds
            )
        )
    watch = peer_watch.start(env, cfg.peer_timeout_seconds, who.prefix)  # InPlace: a silent node is left
    from .trainer import Trainer  # after the group exists: a bad rendezvous fails before the model is built

    replicas = None
    if replica_env is not None:
        from .replica_groups import ReplicaGroups  # torchft is imported in its mode only

        replicas = ReplicaGroups(replica_env, env)
    trainer = Trainer(cfg, env, device, who, replicas=replicas)
    trainer.serve_metrics()
    try:
        trainer.resume()  # before the sized line: the checkpoint holds the micro-batch limit
    except CheckpointMismatch as e:
        return recorded_failure(e, exit_codes.CHECKPOINT_MISMATCH, f"{who.prefix} ERROR {e}")
    except CheckpointUnreadable as e:
        return recorded_failure(e, exit_codes.CHECKPOINT_UNREADABLE, f"{who.prefix} ERROR {e}")
    trainer.settle_micro_batch()  # --train.micro-batch-size auto: after resume, which may keep an earlier answer
    if trainer.talks:
        emit(trainer.sized_line())
        emit(startup_line(who, process_age_seconds(), rendezvous_seconds, trainer.checkpoint_load_seconds))
    try:
        code = trainer.train()
    except CheckpointDiskFull as e:
        return disk_full(who, e)
    if watch is not None:
        watch.stop()
    if replicas is not None:
        replicas.shutdown()
    dist.destroy_process_group()
    return code


def config_error(error: ConfigError) -> int:
    return recorded_failure(error, exit_codes.CONFIG_ERROR, f"ddp_trainer: configuration error: {error}")


def disk_full(who: Identity, error: CheckpointDiskFull) -> int:
    return recorded_failure(error, exit_codes.CHECKPOINT_DISK_FULL, f"{who.prefix} ERROR {error.strerror}")


if __name__ == "__main__":
    leave(main())
