"""The process the agent starts for each container:
`python -m ddpjob_localnode.pod_init PARENT_PID CWD HOSTNAME -- ARGV`.

It gives the container what a runtime would: its own PID namespace, whose init (a fork of this shim) dies
with the shim, so killing the shim or the agent reaps the whole tree, even processes that started their own
session (torchrun's workers do); and its own UTS namespace with the pod's hostname, as in a real pod. Both
matter to torchrun: its rendezvous tells nodes apart by hostname and pid, which would otherwise be equal for
every pod on this machine (all "pid 2" on host "vm"). SIGTERM is forwarded to the container's main process
only, as a runtime delivers it to PID 1. Exit status: the main process's code, or 128 + signal number."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
CLONE_NEWPID = 0x20000000
CLONE_NEWUTS = 0x04000000
_libc = ctypes.CDLL(None, use_errno=True)


def die_with_parent(expected_parent: int) -> None:
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # The parent may have died before prctl took effect; then nobody would ever kill us. (A parent outside our
    # PID namespace reads as 0.)
    if os.getppid() not in (expected_parent, 0):
        os._exit(137)


def exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def forward_signals(target: int) -> None:
    def forward(signum, _frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)


def exec_container(cwd: str, argv: list[str]) -> None:
    try:
        os.chdir(cwd)
        os.execvpe(argv[0], argv, os.environ)
    except OSError as err:
        print(f"local node: cannot start {argv[0]!r}: {err.strerror}", file=sys.stderr, flush=True)
        os._exit(127 if isinstance(err, FileNotFoundError) else 126)


def run_as_init(cwd: str, argv: list[str]) -> None:
    """PID 1 of the namespace: start the main process, reap every orphan, exit when the main process does
    (which makes the kernel kill whatever is left in the namespace)."""
    main = os.fork()
    if main == 0:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        exec_container(cwd, argv)
    forward_signals(main)
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == main:
            os._exit(exit_code(status))


def main(args: list[str]) -> None:
    parent, cwd, hostname, argv = int(args[0]), args[1], args[2], args[4:]
    die_with_parent(parent)
    # No CAP_SYS_ADMIN (unshare fails): run directly; the agent then kills the process group instead.
    isolated = _libc.unshare(CLONE_NEWPID | CLONE_NEWUTS) == 0
    if isolated and hostname:
        _libc.sethostname(hostname.encode(), len(hostname.encode()))
    if not isolated:
        exec_container(cwd, argv)
    me = os.getpid()
    child = os.fork()
    if child == 0:
        die_with_parent(me)
        run_as_init(cwd, argv)
    forward_signals(child)
    _, status = os.waitpid(child, 0)
    os._exit(exit_code(status))


if __name__ == "__main__":
    main(sys.argv[1:])
