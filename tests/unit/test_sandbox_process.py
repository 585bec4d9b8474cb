"""The process backend: results, limits, degraded hosts, infra errors and thread safety."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from sandbox.base import STATUSES, Limits
from sandbox.config import SandboxConfig
from sandbox.hostile import BY_NAME, HostContext, problems
from sandbox.process import ProcessSandbox
from sandbox.registry import make_sandbox


ROLLFORGE = os.path.join(os.path.dirname(sys.executable), "rollforge")  # the installed command


@pytest.fixture(scope="module")
def sandbox():
    return ProcessSandbox()


def run_py(sbx, src: str, limits: Limits = Limits(), **kw):
    return sbx.run({"main.py": src}, ["python", "main.py"], limits, **kw)


def test_ok_run_returns_stdout_exit_code_and_peak_memory(sandbox):
    r = run_py(sandbox, "import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert (r.status, r.exit_code, r.stdout, r.stderr) == ("ok", 0, "out\n", "err\n")
    assert r.backend == "process" and r.duration_s > 0
    if "memory_cgroup" in sandbox.protections:
        assert 0 < r.peak_memory_mb < 512


def test_nonzero_exit_is_failed_with_its_code(sandbox):
    r = run_py(sandbox, "raise SystemExit(3)")
    assert (r.status, r.exit_code) == ("failed", 3)


def test_stdin_reaches_the_program_and_collected_files_come_back(sandbox):
    r = sandbox.run({"main.py": "import sys\nopen('out.txt','w').write(sys.stdin.read()[::-1])",
                     "data/in.txt": "x"}, ["python", "main.py"], stdin=b"abc",
                    collect=["out.txt", "missing.txt"])
    assert r.status == "ok" and dict(r.files) == {"out.txt": "cba"}


_SHOW_BASE = """import os
print(open('a.txt').read(), open('pkg/c.txt').read(), open('pkg/b.txt').read())
open('pkg/new.txt', 'w').write('made')          # every folder is the run's own
try:
    open('a.txt', 'a').write('changed')         # a base file is read-only in place
    print('wrote a.txt')
except OSError as exc:
    print('refused', type(exc).__name__)
"""


def _base(tmp_path):
    from sandbox.base import BaseTree

    (tmp_path / "pkg").mkdir()
    (tmp_path / "a.txt").write_text("A")
    (tmp_path / "pkg" / "b.txt").write_text("B")
    (tmp_path / "pkg" / "c.txt").write_text("C")
    (tmp_path / "secret.txt").write_text("not listed")
    return BaseTree(str(tmp_path), ("a.txt", "pkg/b.txt", "pkg/c.txt"))


@pytest.mark.parametrize("bwrap", [True, False], ids=["bind_mounts", "copy_fallback"])
def test_a_base_tree_is_shown_under_the_runs_files_and_left_unchanged(tmp_path, bwrap):
    sbx = ProcessSandbox(use_bwrap=bwrap, fork_server=False)
    if bwrap and not sbx.host.bwrap:
        pytest.skip("no bubblewrap here")
    r = sbx.run({"main.py": _SHOW_BASE, "pkg/b.txt": "mine"}, ["python", "main.py"],
                base=_base(tmp_path), collect=["pkg/new.txt", "secret.txt"])
    assert r.status == "ok", r.stderr
    first, second = r.stdout.splitlines()
    assert first == "A C mine" and dict(r.files) == {"pkg/new.txt": "made"}
    # under bubblewrap a base file is a read-only mount; without it, the run's own copy
    assert (second.startswith("refused ") if bwrap else second == "wrote a.txt"), second
    assert (tmp_path / "a.txt").read_text() == "A" and (tmp_path / "pkg" / "b.txt").read_text() == "B"
    assert not (tmp_path / "pkg" / "new.txt").exists()


def test_workspace_and_tmp_do_not_survive_into_the_next_execution(sandbox):
    first = run_py(sandbox, "open('/tmp/left','w').write('1'); open('left','w').write('1')")
    second = run_py(sandbox, "import os\nprint(os.path.exists('/tmp/left'), os.listdir('.'))")
    assert first.status == "ok" and second.stdout == "False ['main.py']\n"


def test_paths_escaping_the_workspace_and_empty_argv_are_refused(sandbox):
    with pytest.raises(ValueError, match="inside the workspace"):
        sandbox.run({"../x.py": "pass"}, ["python", "x.py"])
    with pytest.raises(ValueError, match="inside the workspace"):
        sandbox.run({"/etc/x.py": "pass"}, ["python", "x.py"])
    with pytest.raises(ValueError, match="argv"):
        sandbox.run({}, [])


def test_unwritable_workspace_is_infra_error_not_a_failed_solution(sandbox, monkeypatch):
    monkeypatch.setenv("ROLLFORGE_SANDBOX_TMP", "/nonexistent/rollforge")
    r = run_py(sandbox, "print(1)")
    assert r.status == "infra_error" and r.infra_error and "workspace" in r.error
    assert r.exit_code is None


def test_missing_command_inside_the_sandbox_is_the_programs_failure(sandbox):
    r = sandbox.run({}, ["no-such-command-rollforge"])
    assert r.status == "failed" and r.exit_code != 0


def test_concurrent_runs_from_threads_each_get_their_own_output(sandbox):
    results: dict[int, str] = {}

    def worker(i: int) -> None:
        for j in range(3):
            r = run_py(sandbox, f"print({i} * 100 + {j})")
            results[i * 100 + j] = r.stdout.strip() if r.status == "ok" else r.status

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {k: str(k) for k in results} and len(results) == 12


def test_every_status_the_backend_returns_is_a_declared_one(sandbox):
    r = run_py(sandbox, "print('x' * 100)", Limits(output_bytes=10))
    assert r.status == "output_truncated" and r.status in STATUSES and len(r.stdout) == 10


def test_this_host_applies_every_protection():
    """CI installs bubblewrap and runs as root with writable cgroup v1 memory/pids."""
    sbx = ProcessSandbox()
    if os.geteuid() != 0:
        pytest.skip("not root: the full set needs root (CI runs as root)")
    assert sbx.missing == {}


def test_without_bwrap_and_cgroups_it_says_what_is_missing_and_still_limits():
    sbx = ProcessSandbox(use_bwrap=False, use_cgroups=False)
    assert {"readonly_root", "private_tmp", "memory_cgroup", "pids_cgroup"} <= set(sbx.missing)
    assert all(reason for reason in sbx.missing.values())
    assert not set(sbx.protections) & set(sbx.missing)
    mem = run_py(sbx, BY_NAME["memory_bomb"].source, BY_NAME["memory_bomb"].limits)
    assert mem.status == "memory_exceeded"
    loop = run_py(sbx, "while True: pass", Limits(timeout_s=1))
    assert loop.status == "timeout"
    if sbx.host.unshare:  # namespaces still come from unshare
        net = run_py(sbx, "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)")
        assert net.status == "failed" and "unreachable" in net.stderr.lower()


def test_strict_config_refuses_a_sandbox_missing_protections():
    with pytest.raises(RuntimeError, match="readonly_root"):
        make_sandbox(SandboxConfig(backend="process", use_bwrap=False, strict=True))


def test_registry_builds_the_process_backend_and_rejects_unknown_names():
    assert make_sandbox(SandboxConfig()).name == "process"
    with pytest.raises(ValueError, match="backend"):
        SandboxConfig(backend="vm")


class _Unsandboxed:
    """Runs code with no isolation at all: the containment checks must catch it."""

    def run(self, files, argv, limits):
        import tempfile
        d = tempfile.mkdtemp()
        for k, v in files.items():
            open(os.path.join(d, k), "w").write(v)
        with open(os.path.join(d, "out"), "w+") as out, open(os.path.join(d, "err"), "w+") as err:
            # files, not pipes: a child it leaves running would hold a pipe open
            p = subprocess.run([sys.executable, *argv[1:]], cwd=d, stdout=out, stderr=err,
                               timeout=limits.timeout_s)
            out.seek(0)
            err.seek(0)
            from sandbox.base import ExecResult
            return ExecResult("ok" if p.returncode == 0 else "failed", p.returncode, out.read(),
                              err.read(), 0.0, "none")


@pytest.mark.parametrize("name", ["network_to_host_loopback", "read_host_env_and_files",
                                  "write_outside_workspace", "leave_child_running"])
def test_containment_checks_catch_an_unsandboxed_run(name, tmp_path, monkeypatch):
    import socket
    import secrets
    from sandbox.hostile import leftover_processes
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    token, secret = secrets.token_hex(8), "rollforge-secret-" + secrets.token_hex(8)
    outside = str(tmp_path / "outside.txt")
    open(outside + ".secret", "w").write(secret)
    monkeypatch.setenv("ROLLFORGE_TEST_SECRET", secret)
    ctx = HostContext(token, listener.getsockname()[1], secret, outside)
    h = BY_NAME[name]
    try:
        r = _Unsandboxed().run({"main.py": ctx.fill(h)}, ["python", "main.py"], h.limits)
        listener.settimeout(0.5)
        try:
            listener.accept()[0].close()
            connections = 1
        except OSError:
            connections = 0
        assert problems(h, r, ctx, connections) != []
    finally:
        listener.close()
        for pid in leftover_processes(token):
            os.kill(pid, 9)


def test_cli_exec_prints_one_json_record(tmp_path):
    f = tmp_path / "prog.py"
    f.write_text("print('hi')\nraise SystemExit(4)\n")
    p = subprocess.run([ROLLFORGE, "exec", "--backend", "process", "--timeout", "5",
                        "--memory-mb", "256", "--pids", "16", str(f)],
                       capture_output=True, text=True)
    record = json.loads(p.stdout)
    assert p.returncode == 1
    assert (record["status"], record["exit_code"], record["stdout"]) == ("failed", 4, "hi\n")
    assert set(record) >= {"duration_s", "peak_memory_mb", "stderr", "protections"}


def test_cli_exec_rejects_a_bad_limit_with_usage_error(tmp_path):
    f = tmp_path / "prog.py"
    f.write_text("pass\n")
    p = subprocess.run([ROLLFORGE, "exec", "--memory-mb", "0", str(f)],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "--memory-mb" in p.stderr


def test_a_fixed_hash_seed_gives_the_same_set_order_on_every_run_and_stays_isolated():
    sbx = ProcessSandbox(fork_server=False, fixed_hash_seed=True)
    code = ("import sys; print(list({'a', 'b', 'c', 'd', None, (None, 3)}), "
            "sys.flags.no_user_site, sys.flags.safe_path, sys.flags.dont_write_bytecode)")
    outs = {sbx.run({}, ["python", "-c", code]).stdout for _ in range(3)}
    assert len(outs) == 1 and outs.pop().endswith(" 1 True 1\n")
