"""The process backend's fork-server fast path gives the same result records as a fresh
interpreter (real zygotes, real subprocesses), takes only the runs it can, and is switched by the
config, the environment and the CLI. Isolation and zygote lifecycle:
`test_sandbox_fork_server_isolation.py`."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from sandbox.base import Limits
from sandbox.config import SandboxConfig
from sandbox import fork_server
from sandbox.fork_server import plan_fast, trust_script
from sandbox.process import ProcessSandbox, fork_server_unavailable
from fork_server_common import run_py, served
from sandbox.registry import make_sandbox

ROLLFORGE = os.path.join(os.path.dirname(sys.executable), "rollforge")


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
                Limits(timeout_s=3.0)),
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


def test_grading_a_humaneval_sample_goes_through_the_fast_path(fast):
    from rewards.aggregate import RewardConfig
    from envs.score import score
    from envs.humaneval.problems import humaneval_by_id

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


@pytest.mark.parametrize("source", [
    "def f():\n    raise ValueError('x')\n\nf()\n",
    "x = 1\nprint(x is 1)\n",  # a SyntaxWarning, printed when the file is compiled
])
def test_a_registered_harness_is_compiled_once_with_the_same_results(fast, plain, source,
                                                                    monkeypatch):
    monkeypatch.setattr(fork_server, "_TRUSTED", set(fork_server._TRUSTED))  # no leak to others
    trust_script(source)  # what a grader does for its harness source at import
    runs = [{"main.py": source, "data.txt": str(i)} for i in range(4)]
    want = [_record(plain.run(files, ["python", "main.py"])) for files in runs]
    assert [_record(fast.run(files, ["python", "main.py"])) for files in runs] == want
    digest = hashlib.sha256(source.encode()).digest()  # sent for the zygote to keep compiled
    assert any(digest in z.remembered for z in fast.fork_server._all)
    edited = source + "print('edited')\n"  # same name, other bytes: never the old code
    assert _record(run_py(fast, edited)) == _record(run_py(plain, edited))


def test_a_candidate_script_run_with_other_files_each_time_is_never_kept(fast):
    # a candidate's own program run as a harness is (other data each time): later executions
    # could read whatever the zygote keeps, so only registered harnesses are kept
    source = "print(open('data.txt').read())\n"
    for i in range(4):
        assert fast.run({"main.py": source, "data.txt": str(i)}, ["python", "main.py"]).status == "ok"
    digest = hashlib.sha256(source.encode()).digest()
    assert not any(digest in z.remembered for z in fast.fork_server._all)


def test_a_program_run_again_with_the_same_files_is_not_kept_by_the_zygote(fast):
    source = "print('a program, not a harness: later executions must not find it')\n"
    for _ in range(3):
        assert run_py(fast, source).status == "ok"
    digest = hashlib.sha256(source.encode()).digest()
    assert not any(digest in z.remembered for z in fast.fork_server._all)


def test_warmed_zygotes_serve_the_next_runs_and_close_stops_them():
    """warm() starts zygotes in the background; concurrent runs take them (none starts its
    own), and close() stops them with the rest."""
    import threading

    sbx = ProcessSandbox()
    if sbx.fork_server is None:
        pytest.skip(f"no fork server here: {fork_server_unavailable(sbx.host)}")
    fs = sbx.fork_server
    try:
        files = {"main.py": "print(6 * 7)"}
        fs.warm(files, ["python", "main.py"], 2)
        fs.warm(files, ["python", "main.py"], 2)  # already starting: nothing more
        fs.warm(files, ["python", "-m", "json.tool"], 2)  # the plain way: nothing
        with fs._lock:  # until both have started, with no run asking for them
            fs._ready.wait_for(lambda: not any(fs._warming.values()), 60)
        assert fs.started == 2 and len(fs.zygote_pids()) == 2 and fs.served == 0
        got = []
        runs = [threading.Thread(target=lambda: got.append(run_py(sbx, "print(6 * 7)")))
                for _ in range(2)]
        for t in runs:
            t.start()
        for t in runs:
            t.join()
        assert [(r.status, r.stdout) for r in got] == [("ok", "42\n")] * 2
        assert fs.started == 2 and fs.served == 2
        assert len(fs.zygote_pids()) == 2
    finally:
        sbx.close()
    assert fs.zygote_pids() == []


PRELOAD_PROBE = "import sys\nprint('fractions' in sys.modules, 'csv' in sys.modules)"


def test_a_run_that_names_a_preload_forks_from_a_zygote_of_its_own(fast):
    """`preload` loads more modules in zygotes keyed by the list; those zygotes serve only runs
    that name the same list, and a run that names none never forks from one."""
    fs = fast.fork_server
    assert "fractions" not in fs.preload
    before = run_py(fast, PRELOAD_PROBE)
    started = fs.started
    with_it = [run_py(fast, PRELOAD_PROBE, preload=["fractions"]) for _ in range(2)]
    assert [(r.status, r.stdout) for r in with_it] == [("ok", "True False\n")] * 2
    assert fs.started == started + 1  # one new zygote, kept for the second run
    again = run_py(fast, PRELOAD_PROBE, preload=("fractions", "json"))  # json: already the base's
    assert (again.status, again.stdout, fs.started) == ("ok", "True False\n", started + 1)
    after = run_py(fast, PRELOAD_PROBE)
    assert before.stdout == after.stdout == "False False\n"
    assert sorted({z.key[2] for z in fs._all}) == [(), ("fractions",)]


@pytest.mark.parametrize("preload", [["ctypes"], ["socket"], ["envs.io"], ["rewards"],
                                     ["fractions; import os"], "fractions"])
def test_a_preload_the_guard_denies_or_that_is_no_module_name_is_refused(fast, preload):
    with pytest.raises(ValueError, match="preload="):
        run_py(fast, PRELOAD_PROBE, preload=preload)
