"""How a worker process ends: once its work is done, or with a failure of its own exit code."""

from __future__ import annotations

import atexit
import os
import sys


def leave(code: int | None) -> None:
    """Exit without the interpreter's finalization. A finished gloo rank aborted now and then at its exit (SIGABRT
    from a C++ thread, '<no Python frame>'), seen in full test runs under load: a job that had trained every step
    and written its last checkpoint then failed or restarted. PyTorch's own account of it: objects that gloo's
    worker threads still hold are freed during finalization and take the GIL of a dying interpreter; DDP's
    reducer keeps the process group alive past destroy_process_group, so that happens here too. Everything a run
    leaves is on disk by now (checkpoints are renamed into place), and the streams are flushed first.

    The atexit handlers still run, first: a user's entrypoint registers its own (a metrics logger's flush, an
    experiment tracker's finish), and os._exit alone would drop them. They run in a whole interpreter, as at a
    normal exit; only the finalization after them is skipped. One that raises is reported on stderr and the rest
    still run (atexit's own rule); the exit code stays the run's."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


def recorded_failure(error: Exception, code: int, line: str) -> int:
    """Record `error` for the termination log, print `line` and return `code` to exit with."""
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

    # A distinct exit code bypasses @record's own recording; the termination log must still say what to fix.
    ErrorHandler().record_exception(error)
    print(line, file=sys.stderr, flush=True)
    return code
