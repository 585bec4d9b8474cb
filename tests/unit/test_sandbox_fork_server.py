"""The process backend's fork-server fast path, with real zygotes and real subprocesses: the same
result records as a fresh interpreter, nothing an execution does reaches the next one, the code
cannot touch its zygote, and a dead or broken zygote is replaced without scoring anyone."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from sandbox import zygote_host
from sandbox.base import Limits
from sandbox.config import SandboxConfig
from sandbox.fork_server import DENIED_PRELOAD, ForkServer, plan_fast
from sandbox.hostile import HOSTILE, Listener, make_context, problems
from sandbox.process import ProcessSandbox, fork_server_unavailable
from sandbox.registry import make_sandbox

ROLLFORGE = os.path.join(os.path.dirname(sys.executable), "rollforge")


@pytest.fixture(scope="module")
def fast():
    sbx = ProcessSandbox()
    if sbx.fork_server is None:
        pytest.skip(f"no fork server here: {fork_server_unavailable(sbx.host)}")
    yield sbx
    sbx.close()


@pytest.fixture(scope="module")
def plain():
    return ProcessSandbox(fork_server=False)


def run_py(sbx, src, limits=Limits(), **kw):
    return sbx.run({"main.py": src}, ["python", "main.py"], limits, **kw)


def served(sbx) -> int:
    return sbx.fork_server.served


# name -> (files, argv, limits, stdin, collect). Each prints the same bytes however fast it runs.
_L = Limits(timeout_s=5.0, memory_mb=128, pids=16, output_bytes=4096, file_size_mb=1)
PROGRAMS = {
    "ok": ({"main.py": "import sys\nprint('out')\nprint('err', file=sys.stderr)\n"}, None, _L),
    "exception": ({"main.py": "def f():\n    return 1 / 0\n\nf()\n"}, None, _L),
    "chained_exception_and_excepthook": ({"main.py": """
import sys
def hook(t, v, tb):
    print("hooked", t.__name__, tb.tb_frame.f_code.co_name, file=sys.stderr)
try:
    {}["k"]
except KeyError as e:
    sys.excepthook = hook
    raise ValueError("outer") from e
"""}, None, _L),
    "syntax_error": ({"main.py": "x = (\n"}, None, _L),
    "utf8_source_with_bom": ({"main.py": "\ufeffprint('é')\n".encode()}, None, _L),
    "sys_exit_message": ({"main.py": "import sys\nsys.exit('bye')\n"}, None, _L),
    "sys_exit_code": ({"main.py": "raise SystemExit(3)\n"}, None, _L),
    "os_exit_skips_flush": ({"main.py": "import os\nprint('lost')\nos._exit(7)\n"}, None, _L),
    "keyboard_interrupt": ({"main.py": "raise KeyboardInterrupt\n"}, None, _L),
    "killed_by_signal": ({"main.py": "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n"},
                         None, _L),
    "timeout": ({"main.py": "print('start', flush=True)\nwhile True:\n    pass\n"}, None,
                Limits(timeout_s=1.0)),
    "memory_blow_up": ({"main.py": "x = bytearray(600 << 20)\nprint(len(x))\n"}, None, _L),
    "huge_output": ({"main.py": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"},
                    None, _L),
    "file_too_large": ({"main.py": "open('big', 'wb').write(b'x' * (3 << 20))\n"}, None, _L),
    "files_written_and_collected": ({"main.py": """
import os
open('out.txt', 'w').write(open('data/in.txt').read().upper())
open('/tmp/t.txt', 'w').write('tmp')
print(sorted(os.listdir('.')), open('/tmp/t.txt').read())
""", "data/in.txt": "abc"}, None, _L, None, ("out.txt", "missing.txt")),
    "stdin": ({"main.py": "import sys\nprint(sys.stdin.read()[::-1])\n"}, None, _L, b"abc"),
    "large_stdin_partly_read": ({"main.py": "import sys\n"
                                            "print(len(sys.stdin.buffer.read(300000)))\n"},
                                None, _L, bytes(range(256)) * 4096),
    "large_stdin": ({"main.py": "import hashlib, sys\n"
                                "print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())\n"},
                    None, _L, bytes(range(256)) * 4096),
    "no_stdin": ({"main.py": "import sys\nprint(repr(sys.stdin.read()))\n"}, None, _L),
    "signal_handlers_and_alarm": ({"main.py": """
import signal, time
signal.signal(signal.SIGALRM, lambda s, f: print("alarm", s))
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.setitimer(signal.ITIMER_REAL, 0.05)
time.sleep(0.5)
print("after")
"""}, None, _L),
    "threads_left_running": ({"main.py": """
import threading, time
done = threading.Event()
threading.Thread(target=lambda: (done.wait(), time.sleep(0.1), print("late non-daemon"))).start()
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print("main done")
done.set()
"""}, None, _L),
    "atexit_and_teardown": ({"main.py": """
import atexit
class Noisy:
    def __del__(self):
        print("teardown")
keep = Noisy()
atexit.register(print, "atexit")
print("main")
"""}, None, _L),
    "monkeypatch_builtins_and_modules": ({"main.py": """
import builtins, json, sys
builtins.len = lambda x: 42
json.dumps = lambda *a, **k: "pwned"
sys.stdout.write("%s %s\\n" % (len([1]), json.dumps([1])))
"""}, None, _L),
    "thread_limit": ({"main.py": """
import threading
ev, n = threading.Event(), 0
try:
    while True:
        threading.Thread(target=ev.wait, daemon=True).start()
        n += 1
except RuntimeError as exc:
    print(n, exc)
ev.set()
"""}, None, _L),
    "process_limit": ({"main.py": """
import os
n, kids = 0, []
try:
    while True:
        r, w = os.pipe()
        if os.fork() == 0:
            os.read(r, 1)
            os._exit(0)
        kids.append(w)
        n += 1
except OSError as exc:
    print(n, exc.errno)
"""}, None, _L),
    "stdout_flush_fails_at_exit": ({"main.py": "import sys\nsys.stdout = open('/dev/full', 'w')\n"
                                               "print('x')\n"}, None, _L),
    "invalid_utf8_output": ({"main.py": "import sys\nsys.stdout.buffer.write(b'a\\xffb\\n')\n"},
                            None, _L),
    "identity": ({"main.py": """
import os, sys
print(__name__, __file__, __cached__, sys.argv, sys.orig_argv[1:], sys.path)
print(os.getcwd(), sorted(os.environ.items()), os.getuid() >= 2_000_000, os.getppid())
print(sorted(k for k in globals()), sys.flags.isolated, sys.flags.no_site, os.umask(0o22))
"""}, ["python", "main.py", "a", "b"], _L),
    "script_in_a_folder": ({"pkg/run.py": "import sys\nprint(__file__, sys.argv)\n"},
                           ["python", "./pkg/run.py", "x"], _L),
    "dash_c_with_args": ({}, ["python", "-c", "import sys\nprint(sys.argv, __name__)\n1/0", "x"],
                         _L),
    "no_site": ({"main.py": "import sys\nprint(sys.flags.no_site, 'site' in sys.modules)\n"},
                ["python", "-S", "main.py"], _L),
}


def _run(sbx, spec):
    files, argv, limits, stdin, collect = tuple(spec) + (None, ())[len(spec) - 3:]
    return sbx.run(files, argv or ["python", "main.py"], limits, stdin=stdin, collect=collect)


def _record(r):
    return (r.status, r.exit_code, r.stdout, r.stderr, dict(r.files))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_fast_path_gives_the_same_result_record_as_a_fresh_interpreter(fast, plain, name):
    before = served(fast)
    got = _run(fast, PROGRAMS[name])
    assert served(fast) == before + 1, "the fast path did not serve it"
    want = _run(plain, PROGRAMS[name])
    assert _record(got) == _record(want)
    assert got.backend == want.backend == "process" and got.error is None


def test_without_cgroups_the_rlimit_fallback_gives_the_same_results():
    """Hosts without cgroup v1 (cgroup v2 only, for one): rlimits stand in, for both paths."""
    fast, plain = ProcessSandbox(use_cgroups=False), ProcessSandbox(use_cgroups=False,
                                                                    fork_server=False)
    if fast.fork_server is None:
        pytest.skip(f"no fork server here: {fork_server_unavailable(fast.host)}")
    try:
        # Under RLIMIT_AS how many threads fit depends on glibc's malloc arenas (64 MiB of
        # address space each, made when threads contend): it varies between plain runs too.
        names = sorted(set(PROGRAMS) - {"thread_limit"})
        for name in names:
            assert _record(_run(fast, PROGRAMS[name])) == _record(_run(plain, PROGRAMS[name])), name
        assert fast.fork_server.served == len(names)
    finally:
        fast.close()


def test_fork_bomb_is_contained_alike_and_the_next_execution_works(fast, plain):
    bomb = ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
            "        pass\n")
    limits = Limits(timeout_s=1.5, memory_mb=256, pids=32)
    for sbx in (fast, plain):
        r = run_py(sbx, bomb, limits)
        assert r.status in ("timeout", "memory_exceeded") and r.stdout == "", r
    after = run_py(fast, "print(6 * 7)")
    assert (after.status, after.stdout) == ("ok", "42\n")


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
    sbx = ProcessSandbox()
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
    sbx = ProcessSandbox()
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
    sbx = ProcessSandbox()
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


def test_grading_a_humaneval_sample_goes_through_the_fast_path(fast):
    from rewards.aggregate import RewardConfig
    from rewards.score import score
    from tasks.humaneval import humaneval_by_id

    task = humaneval_by_id()["HumanEval/2"]
    before = served(fast)
    bd, _ = score(task, task.reference, fast, Limits(timeout_s=5.0), RewardConfig())
    assert bd.solved and bd.reward == 1.0 and bd.hack_flags == ()
    assert served(fast) == before + 1


@pytest.mark.parametrize("argv, fast_path", [
    (["python", "main.py", "x"], True),
    (["python", "-S", "main.py"], True),
    (["python", "-c", "pass"], True),
    (["python", "-m", "json.tool"], False),
    (["python", "other.py"], False),  # not among the files
    (["python", "main.pyc"], False),
    (["python", "latin.py"], False),  # not UTF-8: the interpreter's own words for its errors
    (["python", "cookie.py"], False),
    (["python", "-X", "dev", "main.py"], False),
    (["python", "-"], False),
    (["sh", "-c", "true"], False),
])
def test_only_plain_script_and_dash_c_runs_take_the_fast_path(fast, argv, fast_path):
    files = {"main.py": "pass", "main.pyc": b"", "latin.py": b"print('\xff')",
             "cookie.py": "# -*- coding: latin-1 -*-\nprint(1)\n"}
    assert (plan_fast(fast._command(argv), fast.python, files) is not None) == fast_path


def test_other_commands_still_run_the_plain_way(fast, plain):
    before = served(fast)
    r = fast.run({"d.json": "[1]"}, ["python", "-m", "json.tool", "d.json"])
    assert (r.status, r.stdout) == ("ok", "[\n    1\n]\n") and served(fast) == before
    bad = {"main.py": b"print('\xff')\n"}
    assert _record(fast.run(bad, ["python", "main.py"])) == _record(
        plain.run(bad, ["python", "main.py"]))
    assert served(fast) == before


def test_config_and_environment_switch_the_fast_path_off(monkeypatch):
    assert make_sandbox(SandboxConfig(fork_server=False)).fork_server is None
    monkeypatch.setenv("ROLLFORGE_FORK_SERVER", "0")
    sbx = ProcessSandbox()
    assert sbx.fork_server is None
    assert run_py(sbx, "print(5)").stdout == "5\n"


@pytest.mark.parametrize("flag, expected", [([], True), (["--no-fork-server"], False)])
def test_cli_exec_uses_the_fork_server_unless_told_not_to(tmp_path, fast, flag, expected):
    f = tmp_path / "prog.py"
    f.write_text("print('hi')\n")
    p = subprocess.run([ROLLFORGE, "exec", *flag, str(f)], capture_output=True, text=True)
    record = json.loads(p.stdout)
    assert (p.returncode, record["status"], record["stdout"]) == (0, "ok", "hi\n")
    assert record["fork_server"] is expected


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
    assert os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
    os.close(r)
    assert fast.fork_server.zygote_pids() == theirs and run_py(fast, "print(1)").stdout == "1\n"


@pytest.mark.parametrize("source", [
    "def f():\n    raise ValueError('x')\n\nf()\n",
    "x = 1\nprint(x is 1)\n",  # a SyntaxWarning, printed when the file is compiled
])
def test_a_script_run_again_is_compiled_once_with_the_same_results(fast, plain, source):
    # Run as a harness is: the same script, other files each time.
    runs = [{"main.py": source, "data.txt": str(i)} for i in range(4)]
    want = [_record(plain.run(files, ["python", "main.py"])) for files in runs]
    assert [_record(fast.run(files, ["python", "main.py"])) for files in runs] == want
    digest = hashlib.sha256(source.encode()).digest()  # sent for the zygote to keep compiled
    assert any(digest in z.remembered for z in fast.fork_server._all)
    edited = source + "print('edited')\n"  # same name, other bytes: never the old code
    assert _record(run_py(fast, edited)) == _record(run_py(plain, edited))


def test_a_program_run_again_with_the_same_files_is_not_kept_by_the_zygote(fast):
    source = "print('a program, not a harness: later executions must not find it')\n"
    for _ in range(3):
        assert run_py(fast, source).status == "ok"
    digest = hashlib.sha256(source.encode()).digest()
    assert not any(digest in z.remembered for z in fast.fork_server._all)


def test_close_stops_the_zygotes_and_a_later_run_starts_afresh():
    sbx = ProcessSandbox()
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
    sbx = ProcessSandbox()
    try:
        assert run_py(sbx, "print(1)").stdout == "1\n"
        assert not stale.exists() and live.exists()
    finally:
        sbx.close()


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid
