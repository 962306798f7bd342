"""An init for when the trainer's entrypoint is a container's PID 1 (the image's ENTRYPOINT, or a pod whose
`command` is `python -m ddp_trainer.torchrun`), as tini or `docker run --init` would be.

PID 1 has two duties no other process has: every orphaned process in the container is re-parented to it and stays
a zombie until it waits for it (a DataLoader worker whose parent died, a user's `subprocess` left behind, a shell's
background job), and the kernel delivers it no signal it has not installed a handler for, so a SIGTERM from the
kubelet would do nothing to a program that relies on the default action. torchrun's agent does neither: it waits
only for its own workers, and a reaper beside it (`waitpid(-1)`) would steal their exit statuses from it.

So, as PID 1, `become_init()` forks: the child returns and runs torchrun as before; the parent stays PID 1 and
only forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the child and reaps whatever dies, until the
child itself ends, whose exit status it exits with (128 + the signal for a child killed by one, as a shell says).
Anywhere else (a process under tini, a test, a local node) it does nothing."""

from __future__ import annotations

import os
import signal

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def exit_code(status: int) -> int:
    """A wait status as the exit code a shell would give: the code, or 128 + the signal that killed it."""
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def become_init() -> None:
    """Returns at once unless this process is PID 1; as PID 1, returns in a child and never returns in the parent."""
    if os.getpid() != 1:
        return
    child = os.fork()
    if child == 0:
        return
    for sig in FORWARDED:
        signal.signal(sig, lambda received, _frame: os.kill(child, received))
    while True:
        try:
            pid, status = os.wait()  # any child: the orphans re-parented to PID 1 too
        except ChildProcessError:  # nothing left to wait for: cannot happen before the child is reaped
            os._exit(1)
        if pid == child:
            os._exit(exit_code(status))
