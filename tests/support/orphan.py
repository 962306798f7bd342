"""A worker that leaves an orphan behind, for the tests of the entrypoint as a container's PID 1
(ddp_trainer/pid1.py): tests/trainer/test_pid1.py (a PID namespace of its own) and tests/realnode (the image)."""

# Run as `python -c WORKER READY_FILE`: a child that forks a grandchild and exits at once, so the grandchild, 0.3 s
# later, ends with no parent but PID 1; then the grandchild's /proc entry is watched: gone once PID 1 reaped it,
# `Z` while nobody does (30 s at most). It prints and writes what it saw, then waits for SIGTERM.
WORKER = r"""
import os, signal, sys, time
r, w = os.pipe()
child = os.fork()
if child == 0:
    grandchild = os.fork()
    if grandchild == 0:
        time.sleep(0.3)
        os._exit(0)
    os.write(w, str(grandchild).encode())
    os._exit(0)
os.waitpid(child, 0)
orphan = int(os.read(r, 32))
state, deadline = "?", time.monotonic() + 30
while time.monotonic() < deadline:
    try:
        state = open(f"/proc/{orphan}/stat").read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "reaped"
        break
    time.sleep(0.1)
signal.signal(signal.SIGTERM, lambda *_: (print("worker: SIGTERM", flush=True), sys.exit(0)))
print(f"orphan {orphan}: {state}", flush=True)  # a SIGTERM sent on seeing this line finds the handler in place
open(sys.argv[1] + ".tmp", "w").write(state)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])  # whole, never seen empty
time.sleep(300)
"""


REAPED = "reaped"
SIGTERM_SEEN = "worker: SIGTERM"
