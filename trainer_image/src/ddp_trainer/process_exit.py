"""How a worker process ends once its work is done."""

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
