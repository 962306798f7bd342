"""The bundled harness as torchrun's function entrypoint (warm_workers.py): torchrun's `run_script_path` runs this
file as `__main__` in a worker forked from the warm fork server, with `sys.argv` the harness's arguments.

Differences from `python -u -m ddp_trainer` that it takes care of:
- multiprocessing's default start method is the platform's again, as in a fresh interpreter: the fork server
  hands its children its own (forkserver), with which a DataLoader's workers would each run this file again;
- this file runs only as `__main__`, so a child process of the user's that imports the main module (a spawn or
  forkserver context) does not start a second trainer;
- stdout is line-buffered (what `-u` gave the progress lines: each reaches the log when it is written);
- success returns, so torchrun gets the worker's return value (it waits for one from every worker), after the
  atexit handlers of a user's entrypoint have run (a forked worker ends with os._exit, which skips them); a
  failure leaves with its exit code at once, as the harness does (process_exit.leave)."""

import atexit
import io
import multiprocessing
import sys

if __name__ == "__main__":
    multiprocessing.set_start_method(None, force=True)
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)

    from ddp_trainer.__main__ import main
    from ddp_trainer.process_exit import leave

    code = main()
    if code:
        leave(code)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
