"""The fork-server fast path isolates executions from each other and from the zygote, and a
dead or broken zygote is replaced without scoring anyone (real zygotes, real subprocesses)."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import threading
import time

import pytest

from sandbox import zygote_host
from sandbox.base import Limits
from sandbox.fork_server import DENIED_PRELOAD, ForkServer
from sandbox.hostile import HOSTILE, Listener, make_context, problems
from sandbox.process import ProcessSandbox, fork_server_unavailable
from fork_server_common import run_py, served


def _fork_sandbox() -> ProcessSandbox:
    """A sandbox of the test's own, with the fork server (skipped where it is off or cannot run,
    as the `fast` fixture is)."""
    sbx = ProcessSandbox()
    if sbx.fork_server is None:
        pytest.skip(f"no fork server here: {fork_server_unavailable(sbx.host)}")
    return sbx


def _record(r):
    return (r.status, r.exit_code, r.stdout, r.stderr, dict(r.files))


POLLUTE = """
import builtins, gc, json, math, os, signal, sys, threading, time, xml.dom
builtins.len = lambda x: 42
json.dumps = lambda *a, **k: "pwned"
math.pi = 3
os.environ["POLLUTED"] = "1"
sys.path.insert(0, "/tmp")
sys.setrecursionlimit(50)
gc.disable()
signal.signal(signal.SIGTERM, lambda *a: None)
signal.signal(signal.SIGALRM, signal.SIG_IGN)
signal.setitimer(signal.ITIMER_REAL, 100)
open("/tmp/left.txt", "w").write("x")
open("left.txt", "w").write("x")
os.mkdir("/tmp/locked", 0)
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
os.umask(0o077)
os.chdir("/tmp")
print("polluted")
"""


PROBE = """
import gc, json, math, os, signal, sys, threading
print(len([1, 2]), json.dumps([1]), math.pi, "POLLUTED" in os.environ, "/tmp" in sys.path)
print(sys.getrecursionlimit(), gc.isenabled(), signal.getsignal(signal.SIGTERM),
      signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL))
print(threading.active_count(), "xml.dom" in sys.modules, os.listdir("/tmp"), os.listdir("."),
      oct(os.umask(0o022)), os.getcwd())
"""


def test_nothing_an_execution_changes_reaches_the_next_one_on_the_same_zygote(fast, plain):
    run_py(fast, "pass")
    zygotes, started = fast.fork_server.zygote_pids(), fast.fork_server.started
    assert run_py(fast, POLLUTE).stdout == "polluted\n"
    after = run_py(fast, PROBE)
    assert (fast.fork_server.zygote_pids(), fast.fork_server.started) == (zygotes, started)
    assert _record(after) == _record(run_py(plain, PROBE)), after


def test_the_zygote_holds_no_module_the_harness_guard_denies(fast):
    r = fast.run({}, ["python", "-c", "import sys\nprint(sorted(m for m in sys.modules "
                      f"if m.split('.')[0] in {DENIED_PRELOAD!r}))"])
    assert (r.status, r.stdout) == ("ok", "[]\n")
    with pytest.raises(ValueError, match="preload"):
        ForkServer(fast, ("json", "ctypes"))


ATTACK_ZYGOTE = r"""
import ctypes, errno, os, signal
libc = ctypes.CDLL(None, use_errno=True)
out = []
for target in (os.getppid(), 1):
    for sig in (signal.SIGTERM, signal.SIGSTOP, signal.SIGKILL):
        try:
            os.kill(target, sig)
            out.append("signalled %d" % target)
        except OSError as exc:
            out.append(errno.errorcode[exc.errno])
try:
    os.kill(-1, signal.SIGKILL)
except OSError:
    pass
rc = libc.ptrace(16, 1, None, None)  # PTRACE_ATTACH
out.append("ptrace %d %s" % (rc, errno.errorcode.get(ctypes.get_errno())))
for path in ("/proc/1/environ", "/proc/1/mem", "/proc/1/fd/3"):
    try:
        open(path, "rb").read(1)
        out.append("read " + path)
    except OSError as exc:
        out.append(errno.errorcode[exc.errno])
try:
    os.listdir("/proc/1/fd")
    out.append("listed fds")
except OSError as exc:
    out.append(errno.errorcode[exc.errno])
print(os.getppid(), out)
"""


def test_code_cannot_kill_ptrace_or_read_its_zygote(fast):
    run_py(fast, "pass")
    zygotes, started = fast.fork_server.zygote_pids(), fast.fork_server.started
    r = run_py(fast, ATTACK_ZYGOTE)
    assert r.status == "ok", r
    parent, out = r.stdout.split(" ", 1)
    assert parent == "1"  # the zygote is pid 1 of the namespace
    assert out.strip() == str(["EPERM"] * 6 + ["ptrace -1 EPERM"] + ["EACCES"] * 4)
    assert run_py(fast, "print(6 * 7)").stdout == "42\n"
    assert (fast.fork_server.zygote_pids(), fast.fork_server.started) == (zygotes, started)


def test_a_zygote_killed_between_executions_is_replaced():
    sbx = _fork_sandbox()
    try:
        assert run_py(sbx, "print(1)").stdout == "1\n"
        [pid] = sbx.fork_server.zygote_pids()
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid)
        r = run_py(sbx, "print(2)")
        assert (r.status, r.stdout) == ("ok", "2\n")
        assert sbx.fork_server.started == 2 and pid not in sbx.fork_server.zygote_pids()
    finally:
        sbx.close()


def test_a_zygote_killed_during_an_execution_is_retried_on_a_fresh_one():
    sbx = _fork_sandbox()
    try:
        run_py(sbx, "pass")
        [pid] = sbx.fork_server.zygote_pids()
        box = []
        t = threading.Thread(target=lambda: box.append(run_py(
            sbx, "import time\nprint('start', flush=True)\ntime.sleep(1.0)\nprint('end')")))
        t.start()
        time.sleep(0.4)
        os.kill(pid, signal.SIGKILL)
        t.join()
        assert (box[0].status, box[0].stdout) == ("ok", "start\nend\n"), box[0]
        assert sbx.fork_server.started == 2
    finally:
        sbx.close()


@pytest.mark.parametrize("breakage", ["dies_at_start", "answers_another_request"])
def test_a_zygote_that_keeps_failing_is_infra_error_never_the_programs_failure(
        breakage, monkeypatch):
    source = zygote_host.ZYGOTE_SOURCE
    if breakage == "dies_at_start":
        source = "import os\nos._exit(3)\n"
    else:
        assert source.count('chan.send({"id": rid, "exit"') == 1
        source = source.replace('chan.send({"id": rid, "exit"', 'chan.send({"id": -1, "exit"')
    monkeypatch.setattr(zygote_host, "ZYGOTE_SOURCE", source)
    sbx = _fork_sandbox()
    try:
        r = run_py(sbx, "print('never scored')")
        assert (r.status, r.infra_error, r.exit_code) == ("infra_error", True, None)
        assert r.error.startswith("fork server:") and sbx.fork_server.started == 2
        assert sbx.fork_server.zygote_pids() == []
    finally:
        sbx.close()


SYSV_SHM = r"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
key = 0x52460001
if sys.argv[1] == "create":
    print(libc.shmget(key, 4096, 0o1666) >= 0)  # IPC_CREAT | 0666: outlives the process
else:
    print(libc.shmget(key, 0, 0o666) >= 0)
"""


def test_a_zygote_left_with_ipc_objects_is_retired_so_the_next_execution_sees_none(fast):
    run_py(fast, "pass")
    started = fast.fork_server.started
    made = fast.run({"main.py": SYSV_SHM}, ["python", "main.py", "create"])
    assert (made.status, made.stdout) == ("ok", "True\n")
    seen = fast.run({"main.py": SYSV_SHM}, ["python", "main.py", "look"])
    assert (seen.status, seen.stdout) == ("ok", "False\n")
    assert fast.fork_server.started == started + 1


@pytest.mark.parametrize("hostile", HOSTILE, ids=[h.name for h in HOSTILE])
def test_hostile_program_is_contained_by_the_fast_path(fast, hostile, tmp_path, monkeypatch):
    if fast.missing:
        pytest.skip(f"host cannot apply every protection: {fast.missing}")
    listener = Listener()
    try:
        ctx = make_context(str(tmp_path), listener.port)
        monkeypatch.setenv("ROLLFORGE_TEST_SECRET", ctx.secret)
        before = served(fast)
        result = run_py(fast, ctx.fill(hostile), hostile.limits)
        assert served(fast) == before + 1
        assert problems(hostile, result, ctx, listener.accepted) == [], result
    finally:
        listener.close()
    assert run_py(fast, "print(6 * 7)").stdout == "42\n"


def _wait_gone(pid: int, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().split(") ")[1].startswith("Z"):
                    return
        except OSError:
            return
        time.sleep(0.01)


def test_a_forked_copy_of_the_host_process_starts_its_own_zygotes(fast):
    run_py(fast, "pass")
    theirs = fast.fork_server.zygote_pids()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the copy: it must neither use nor, at its exit, kill the parent's zygotes
        try:
            res = run_py(fast, "print(6 * 7)")
            ok = res.stdout == "42\n" and not set(fast.fork_server.zygote_pids()) & set(theirs)
            os.write(w, b"1" if ok else b"0")
            fast.close()
        finally:
            os._exit(0)
    os.close(w)
    # a lock another thread held at fork time would hang the copy: fail then, do not wait
    if not select.select([r], [], [], 60)[0]:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked copy gave no answer in 60 s")
    assert os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
    os.close(r)
    assert fast.fork_server.zygote_pids() == theirs and run_py(fast, "print(1)").stdout == "1\n"


def test_a_forked_copy_does_not_wait_for_the_parents_warm_up_in_flight(monkeypatch):
    """A warm-up runs in a thread of the parent; a copy forked while it is in flight has no such
    thread and must start its own zygote instead of waiting for one that never comes."""
    sbx = _fork_sandbox()
    fs = sbx.fork_server
    release, warm_one = threading.Event(), fs._warm_one

    def held(key):  # the parent's warm-up, held in flight until the copy has answered
        release.wait(120)
        warm_one(key)

    monkeypatch.setattr(fs, "_warm_one", held)
    try:
        fs.warm({"main.py": "pass"}, ["python", "main.py"], 1)
        assert sum(fs._warming.values()) == 1
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                res = run_py(sbx, "print(6 * 7)")
                os.write(w, b"1" if res.stdout == "42\n" else b"0")
            finally:
                os._exit(0)
        os.close(w)
        answered = select.select([r], [], [], 60)[0]
        if not answered:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        assert answered, "the forked copy waited for the parent's warm-up (no answer in 60 s)"
        assert os.read(r, 1) == b"1"
        os.close(r)
        release.set()
        with fs._lock:
            fs._ready.wait_for(lambda: not any(fs._warming.values()), 60)
        assert run_py(sbx, "print(1)").stdout == "1\n" and fs.served == 1 and fs.started == 1
    finally:
        release.set()
        sbx.close()


def test_close_stops_the_zygotes_and_a_later_run_starts_afresh():
    sbx = _fork_sandbox()
    try:
        run_py(sbx, "pass")
        [pid] = sbx.fork_server.zygote_pids()
        sbx.close()
        _wait_gone(pid)
        assert not os.path.exists(f"/proc/{pid}") or _is_zombie(pid)
        assert run_py(sbx, "print(3)").stdout == "3\n" and len(sbx.fork_server.zygote_pids()) == 1
    finally:
        sbx.close()
    assert sbx.fork_server.zygote_pids() == []


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1].startswith("Z")
    except OSError:
        return True


SCAN_MEMORY = r"""
import ctypes, re, sys
halves = [(a.encode(), b.encode()) for a, b in (t.split(":") for t in sys.argv[1:])]
found = [0] * len(halves)
for line in open("/proc/self/maps").read().splitlines():
    addr, perms = line.split()[:2]
    if not perms.startswith("r") or line.endswith(("[vvar]", "[vsyscall]", "[vvar_vclock]")):
        continue
    start, end = (int(x, 16) for x in addr.split("-"))
    data = ctypes.string_at(start, end - start)  # (a non-dumpable process: no /proc/self/mem)
    for k, (a, b) in enumerate(halves):
        for m in re.finditer(re.escape(a), data):
            if data[m.end():m.end() + len(b)] == b:
                found[k] += 1
print(found)
"""


def test_a_later_execution_finds_nothing_of_an_earlier_one_in_its_memory(fast):
    """The zygote never holds an execution's code, input or output, so a later fork of it,
    scanning all of its own memory, finds none of it (tokens are searched half by half, so the
    scanner never holds them whole)."""
    run_py(fast, "pass")
    zygotes = fast.fork_server.zygote_pids()
    tokens = [os.urandom(8).hex() for _ in range(4)]  # code, stdin, stdout, control
    code = (f"import sys\n# {tokens[0]}\nsys.stdin.read()\n"
            f"print('{tokens[2][:8]}' + '{tokens[2][8:]}')")
    first = fast.run({}, ["python", "-c", code], stdin=tokens[1].encode())
    assert (first.status, first.stdout) == ("ok", tokens[2] + "\n")
    halves = [f"{t[:8]}:{t[8:]}" for t in tokens]
    scan = fast.run({"main.py": SCAN_MEMORY}, ["python", "main.py", *halves],
                    Limits(timeout_s=30, memory_mb=1024), stdin=tokens[3].encode())
    assert fast.fork_server.zygote_pids() == zygotes  # the same zygote served both
    found = json.loads(scan.stdout)
    assert scan.status == "ok" and found[:3] == [0, 0, 0], scan
    control = fast.run({"main.py": SCAN_MEMORY + "print(sys.stdin.read())"},
                       ["python", "main.py", halves[3]], Limits(timeout_s=30, memory_mb=1024),
                       stdin=tokens[3].encode())
    assert json.loads(control.stdout.splitlines()[0]) == [0]  # read only after the scan
    again = fast.run({"main.py": "import sys\nt = sys.stdin.read()\n" + SCAN_MEMORY},
                     ["python", "main.py", halves[3]], Limits(timeout_s=30, memory_mb=1024),
                     stdin=tokens[3].encode())
    assert json.loads(again.stdout)[0] >= 1  # the scan finds what is there


def test_spools_of_host_processes_that_are_gone_are_swept(tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLFORGE_SANDBOX_TMP", str(tmp_path))
    dead = _dead_pid()
    stale = tmp_path / f"rf-zyg-{dead}-abc"
    live = tmp_path / f"rf-zyg-{os.getpid()}-abc"
    for d in (stale, live):
        (d / "ws").mkdir(parents=True)
    sbx = _fork_sandbox()
    try:
        assert run_py(sbx, "print(1)").stdout == "1\n"
        assert not stale.exists() and live.exists()
    finally:
        sbx.close()


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid
