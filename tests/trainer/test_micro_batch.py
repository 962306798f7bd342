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
