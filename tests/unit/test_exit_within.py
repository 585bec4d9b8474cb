"""A stopped command's exit is bounded (flows/stop.py `exit_within`): a non-daemon thread that
nothing will wake (what a stop raised inside a library's thread pool can leave behind) kept the
interpreter from exiting forever; with the bound the process ends with the stop's status once
the grace is past, printing the stacks of the threads still running; a process whose exit is
not held up ends as it would have, with its own status. Each is a real child process."""
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _child(body: str) -> subprocess.CompletedProcess:
    code = textwrap.dedent("""
        import queue, sys, threading
        from flows.stop import exit_within
    """) + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_an_exit_held_by_a_thread_nothing_wakes_ends_with_the_stops_status_and_its_stacks():
    proc = _child("""
        def orphan_waiting_on_its_queue():
            queue.SimpleQueue().get()  # as a pool worker whose shutdown never reached it
        threading.Thread(target=orphan_waiting_on_its_queue).start()
        exit_within(1.0, 130)
        sys.exit(130)
    """)
    assert proc.returncode == 130, proc.stderr
    assert "the exit did not finish in 1 s" in proc.stderr
    assert "orphan_waiting_on_its_queue" in proc.stderr  # where it hung, for whoever reads it


def test_an_exit_that_is_not_held_keeps_its_own_status_and_says_nothing():
    proc = _child("""
        exit_within(5.0, 130)
        print("done")
        sys.exit(3)
    """)
    assert proc.returncode == 3
    assert proc.stdout == "done\n" and "did not finish" not in proc.stderr
