"""torch's build lock for DeepSpeed's CPU comm op, cleared when its owner is gone.

Every process that starts DeepSpeed on CPU (a trainer rank, the flow's update or SFT) first
loads the shared-memory comm op: torch takes `<TORCH_EXTENSIONS_DIR>/deepspeed_shm_comm/lock`
and runs `ninja` in that folder (a no-op when the build is up to date; minutes of compiling when
it is not, on a loaded machine). A process SIGKILLed meanwhile leaves the file, and torch's
`FileBaton.wait` then waits for it with no limit: every later run on the machine hung at its
first update or SFT with no error (bench/chaos.py, a rank or the flow killed mid-build). The
lock counts as stale when it is older than a build's start and nobody works in the folder
(the owner's `ninja` runs there); a watcher beside the load removes such a lock, so the waiter
goes on (and, if the killed build left no module, fails with torch's own import error, which
the stage's retry builds again).
"""
from __future__ import annotations

import contextlib
import os
import threading
import time

OP_DIR = "deepspeed_shm_comm"
STALE_S = 120.0  # older than this with no process in the build folder: the owner is gone
CHECK_S = 5.0


def _someone_works_in(folder: str) -> bool:
    """A process whose working directory is `folder` (Linux /proc; elsewhere: assume so)."""
    if not os.path.isdir("/proc"):
        return True
    real = os.path.realpath(folder)
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/cwd") == real:
                    return True
    return False


def clear_stale(extensions_dir: str | None = None, stale_s: float = STALE_S) -> bool:
    """Remove the op's build lock if it is stale; True when it did."""
    root = extensions_dir or os.environ.get("TORCH_EXTENSIONS_DIR")
    if not root:
        return False
    folder = os.path.join(root, OP_DIR)
    lock = os.path.join(folder, "lock")
    try:
        age = time.time() - os.stat(lock).st_mtime
    except FileNotFoundError:
        return False
    if age < stale_s or _someone_works_in(folder):
        return False
    with contextlib.suppress(FileNotFoundError):
        os.unlink(lock)
    return True


@contextlib.contextmanager
def watched():
    """While the body loads DeepSpeed, clear a stale build lock every few seconds."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(CHECK_S):
            clear_stale()

    t = threading.Thread(target=watch, name="build-lock-watch", daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()
