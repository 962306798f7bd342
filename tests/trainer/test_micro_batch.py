"""--train.micro-batch-size auto (micro_batch.py): the search for the largest micro-batch that fits, and the
probe's bookkeeping. A GPU's out-of-memory error is torch's own exception here; the CUDA run is hack/gpu_checks.sh's."""

import pytest
import torch

from ddp_trainer.micro_batch import largest_fitting, optimizer_state_bytes


@pytest.mark.parametrize("upper, limit", [
    (1, 1), (64, 64), (64, 48), (64, 33), (64, 32), (64, 1), (100, 77), (1000, 999), (5, 0), (7, 3),
])
def test_the_search_finds_the_largest_that_fits_in_few_tries(upper, limit):
    tried = []

    def fits(m: int) -> bool:
        tried.append(m)
        return m <= limit

    assert largest_fitting(upper, fits) == min(limit, upper)
    assert all(1 <= m <= upper for m in tried) and len(tried) == len(set(tried))  # never the same size twice
    assert len(tried) <= 2 * max(1, upper).bit_length() + 1


def test_an_out_of_memory_error_is_a_size_that_does_not_fit():
    """probe_cuda's `fits` turns torch.OutOfMemoryError into False; the search sees only the answers."""
    def fits(m: int) -> bool:
        try:
            if m > 20:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate ...")
            return True
        except torch.OutOfMemoryError:
            return False

    assert largest_fitting(256, fits) == 20


def test_the_optimizer_state_the_first_step_allocates_is_reserved():
    model = torch.nn.Linear(10, 10)  # 110 fp32 parameters
    assert optimizer_state_bytes(model, "adamw") == 2 * 110 * 4
    assert optimizer_state_bytes(model, "sgd") == 110 * 4


def test_auto_on_cpu_runs_the_rank_share_and_says_so():
    """No device memory to fill: the share in --train.grad-accum-steps micro-batches, and the sized line says how
    the micro-batch was settled."""
    from launch import run, standalone_cmd

    from ddp_trainer.progress_log import SIZED

    done = run(standalone_cmd(2, "--workload", "digits", "--train.steps", "2", "--train.global-batch-size", "48",
                              "--train.grad-accum-steps", "2", "--train.micro-batch-size", "auto",
                              "--metrics.port", "0"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    sized = SIZED.search(done.stdout)
    assert sized and (sized["rank_batch"], sized["micro_batch"], sized["accum"], sized["auto"]) == (
        "24", "12", "2", "share"), done.stdout[-2000:]


@pytest.mark.parametrize("fmt", ["file", "dcp"])
def test_a_resume_on_the_same_device_keeps_the_answer_in_both_formats(tmp_path, monkeypatch, fmt):
    """The answer and the device it was found on go into every checkpoint; the dcp format saved them and never read
    them back (META_KEYS lacked micro_batch_auto), so a restart on the same GPU probed again. The device is faked:
    on CPU there is no answer to keep."""
    import torch.distributed as dist

    from ddp_trainer import trainer as trainer_module
    from ddp_trainer.config import parse_config
    from ddp_trainer.distributed_env import DistEnv
    from ddp_trainer.progress_log import SIZED, Identity
    from ddp_trainer.trainer import Trainer

    here = {"device": "NVIDIA Fake GPU", "memory": 16 << 30}
    monkeypatch.setattr(trainer_module, "device_key_here", lambda device: here)
    cfg = parse_config(["--workload", "digits", "--train.steps", "2", "--train.micro-batch-size", "auto",
                        "--metrics.port", "0", "--checkpoint.dir", str(tmp_path / "ck"), "--checkpoint.format", fmt],
                       {})
    one = DistEnv(rank=0, world_size=1, local_rank=0, local_world_size=1, restart_count=0)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        first = Trainer(cfg, one, torch.device("cpu"), Identity("auto", "0", 0))
        first.train(finish=False)
        first.micro_batch_found = {**here, "limit": 8}  # what a probe on that GPU found
        first.save_checkpoint()
        first.wait_for_checkpoint()

        resumed = Trainer(cfg, one, torch.device("cpu"), Identity("auto", "0", 0))
        assert resumed.resume() and resumed.step == 2
        resumed.settle_micro_batch()  # kept: no probe
    finally:
        dist.destroy_process_group()
    sized = SIZED.search(resumed.sized_line())
    assert sized and sized["auto"] == "kept", resumed.sized_line()
    assert resumed.plan.micro_batch_limit == 8 and resumed.micro_batch_found == {**here, "limit": 8}


def test_the_probe_issues_no_collective_under_sync_batchnorm(tmp_path, monkeypatch):
    """Each rank probes sizes of its own, so a collective in the probe (SyncBatchNorm's all_gather of batch
    statistics) pairs with another rank's at another size, or with none: a hang. The probe runs SyncBatchNorm as
    plain BatchNorm on this rank's samples, and the model trains synchronised afterwards. (On CPU, SyncBatchNorm's
    synchronised path refuses a CPU tensor; every collective is made to raise as well.)"""
    from types import SimpleNamespace

    import torch.distributed as dist

    from ddp_trainer.config import parse_config
    from ddp_trainer.distributed_env import DistEnv
    from ddp_trainer.progress_log import Identity
    from ddp_trainer.trainer import Trainer

    cfg = parse_config(["--workload", "digits", "--train.steps", "1", "--metrics.port", "0"], {})
    one = DistEnv(rank=0, world_size=1, local_rank=0, local_world_size=1, restart_count=0)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        trainer = Trainer(cfg, one, torch.device("cpu"), Identity("probe", "0", 0))
        synced = torch.nn.SyncBatchNorm.convert_sync_batchnorm(trainer.ddp.module)  # as wrap_model does on CUDA
        trainer.ddp = SimpleNamespace(module=synced)
        before = {name: b.clone() for name, b in synced.named_buffers()}

        def collective(*args, **kwargs):
            raise AssertionError("the probe issued a collective")

        for name in ("all_reduce", "all_gather", "all_gather_into_tensor", "broadcast", "reduce_scatter_tensor"):
            monkeypatch.setattr(dist, name, collective)
        run_at = trainer._probe_step()
        for m in (2, 4, 16):  # (BatchNorm refuses one sample in training, synced or not)
            run_at(m)
    finally:
        dist.destroy_process_group()
    assert any(isinstance(m, torch.nn.SyncBatchNorm) for m in synced.modules()), "still synchronised for training"
    assert all(torch.equal(b, before[name]) for name, b in synced.named_buffers())
    assert all(p.grad is None for p in synced.parameters())
