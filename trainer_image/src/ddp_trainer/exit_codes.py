"""Exit codes a worker process ends with. The operator's ExitCode restart policy treats 1-127 as permanent
and 128+ as retryable, so a preemption is retryable, and a full disk, another run's checkpoint or a node whose CUDA
is unusable (which a retry will not fix) are not."""

OK = 0
CONFIG_ERROR = 2  # bad flag or env value; retrying cannot help
CHECKPOINT_DISK_FULL = 28  # ENOSPC's errno, so the number itself hints at the cause
CHECKPOINT_MISMATCH = 65  # the checkpoint is another run's (workload, data set, batch) (sysexits' EX_DATAERR)
NO_USABLE_GPU = 69  # GPUs requested, CUDA unusable (sysexits' EX_UNAVAILABLE); the same node would fail again
PREEMPTED = 143  # 128 + SIGTERM: a checkpoint was written, start again to resume
