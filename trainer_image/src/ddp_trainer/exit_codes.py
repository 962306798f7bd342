"""Exit codes a worker process ends with. The operator's ExitCode restart policy treats 1-127 as permanent
and 128+ as retryable, so a preemption is retryable, and a full disk, another run's checkpoint, checkpoints none of
which loads or a node whose CUDA is unusable (which a retry will not fix) are not."""

OK = 0
CONFIG_ERROR = 2  # bad flag or env value; retrying cannot help
CHECKPOINT_DISK_FULL = 28  # ENOSPC's errno, so the number itself hints at the cause
CHECKPOINT_MISMATCH = 65  # the checkpoint is another run's (workload, data set, batch, model, optimizer) (EX_DATAERR)
CHECKPOINT_UNREADABLE = 66  # checkpoints exist and none loads (sysexits' EX_NOINPUT); step 0 would prune them
NO_USABLE_GPU = 69  # GPUs requested, CUDA unusable (sysexits' EX_UNAVAILABLE); the same node would fail again
PREEMPTED = 143  # 128 + SIGTERM: a checkpoint was written, start again to resume
PEER_LOST = 142  # 128 + SIGALRM: another node went silent (peer_watch.py); retryable, the group forms again
