"""Exit codes a worker process ends with. The operator's ExitCode restart policy treats 1-127 as permanent
and 128+ as retryable, so a preemption is retryable and a full disk (which a retry will not fix) is not."""

OK = 0
CONFIG_ERROR = 2  # bad flag or env value; retrying cannot help
CHECKPOINT_DISK_FULL = 28  # ENOSPC's errno, so the number itself hints at the cause
PREEMPTED = 143  # 128 + SIGTERM: a checkpoint was written, start again to resume
