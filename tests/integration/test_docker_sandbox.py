"""The Docker backend against a real engine: result records, the warm pool and its reset, cold
starts, infra errors, the reaper, the locally built image and `rollforge exec --backend docker`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from sandbox.base import Limits
from sandbox.docker_container import (LABEL, OWNER_LABEL, POOL_LABEL, engine_unavailable, owner_id,
                                      reap)

pytestmark = [pytest.mark.integration, pytest.mark.docker]
_WHY = engine_unavailable()
if _WHY:
    pytest.skip(_WHY, allow_module_level=True)

import docker  # noqa: E402

ROLLFORGE = os.path.join(os.path.dirname(sys.executable), "rollforge")


@pytest.fixture(scope="module")
def client():
    return docker.from_env()


def ours(client, sbx) -> list:
    """`sbx`'s containers: another sandbox of this process (a cached repo-layer sandbox of an
    earlier module) keeps its own until it closes."""
    mine = client.containers.list(all=True, filters={"label": f"{POOL_LABEL}={sbx.pool_id}"})
    assert all(c.labels[OWNER_LABEL] == owner_id() for c in mine)
    return mine


@pytest.fixture
def sandbox(client):
    from sandbox.docker_backend import DockerSandbox

    sbx = DockerSandbox(pool_size=1)
    yield sbx
    sbx.close()
    assert ours(client, sbx) == []  # close() removes every container the sandbox made


def run_py(sbx, src: str, limits: Limits = Limits(), **kw):
    return sbx.run({"main.py": src}, ["python", "main.py"], limits, **kw)


def test_ok_run_reports_output_exit_code_and_peak_memory(sandbox):
    r = run_py(sandbox, "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(0)")
    assert (r.status, r.exit_code, r.stdout, r.stderr, r.backend) == ("ok", 0, "out\n", "err\n",
                                                                      "docker")
    assert r.peak_memory_mb is not None and 0 < r.peak_memory_mb < 512


def test_container_is_locked_down(sandbox):
    src = """
import os, socket
print(os.getuid(), os.getgid())
with open('/proc/self/status') as fh:
    print([l.split()[1] for l in fh if l.startswith(('CapEff', 'NoNewPrivs'))])
try:
    open('/etc/x', 'w')
except OSError as exc:
    print('ro', exc.errno)
print(sorted(n for n in socket.if_nameindex()))
"""
    lines = run_py(sandbox, src).stdout.splitlines()
    assert lines[0] == "65534 65534"
    assert lines[1] == "['0000000000000000', '1']"  # no capabilities, no-new-privileges
    assert lines[2] == "ro 30"  # EROFS: read-only root
    assert lines[3] == "[(1, 'lo')]"  # no network but loopback


def test_warm_container_is_reused_and_reset_between_executions(sandbox, client):
    first = run_py(sandbox, "open('/tmp/x','w').write('1'); open('y','w').write('1')\n"
                            "import subprocess; subprocess.Popen(['sleep', '60'])")
    second = run_py(sandbox, "import os\nprint(os.path.exists('/tmp/x'), os.listdir('.'),"
                             " sorted(p for p in os.listdir('/proc') if p.isdigit()) == "
                             "sorted(['1', str(os.getpid())]))")
    assert first.status == "ok"
    assert second.stdout == "False ['main.py'] True\n"
    assert len(ours(client, sandbox)) == 1


def test_stdin_and_collected_files(sandbox):
    r = sandbox.run({"main.py": "import sys\nopen('o.txt','w').write(sys.stdin.read().upper())",
                     "pkg/data.txt": "d"}, ["python", "main.py"], stdin=b"abc",
                    collect=["o.txt", "nope.txt"])
    assert r.status == "ok" and dict(r.files) == {"o.txt": "ABC"}


def test_concurrent_runs_from_threads_each_get_their_own_output(sandbox):
    results = {}

    def worker(i):
        r = run_py(sandbox, f"print({i})")
        results[i] = r.stdout.strip() if r.status == "ok" else r.status

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: str(i) for i in range(4)}


def test_container_killed_from_outside_is_infra_error_then_a_fresh_one_serves(sandbox, client):
    assert run_py(sandbox, "pass").status == "ok"
    (victim,) = ours(client, sandbox)
    victim.kill()
    broken = run_py(sandbox, "print(1)")
    assert broken.status == "infra_error" and broken.error and broken.exit_code is None
    again = run_py(sandbox, "print(1)")
    assert (again.status, again.stdout) == ("ok", "1\n")


def test_cold_start_mode_leaves_no_container_behind(client):
    from sandbox.docker_backend import DockerSandbox

    sbx = DockerSandbox(pool_size=0)
    r = run_py(sbx, "print('cold')")
    assert (r.status, r.stdout) == ("ok", "cold\n")
    assert ours(client, sbx) == []
    sbx.close()


def test_reaper_removes_containers_of_dead_owners_and_keeps_live_ones(client):
    from sandbox.docker_image import image_tag

    dead = client.containers.create(image_tag(), ["sleep", "60"], labels={
        LABEL: "1", OWNER_LABEL: f"{owner_id().split(':')[0]}:999999999:0"})
    live = client.containers.create(image_tag(), ["sleep", "60"],
                                    labels={LABEL: "1", OWNER_LABEL: owner_id()})
    try:
        removed = reap(client)
        assert dead.id in removed and live.id not in removed
        live.reload()
    finally:
        for c in (dead, live):
            try:
                c.remove(force=True)
            except docker.errors.NotFound:
                pass


def test_image_is_tagged_by_recipe_digest_and_not_rebuilt(client):
    from sandbox.docker_image import RECIPE, ensure_image, image_tag, recipe_digest

    tag = ensure_image(client)
    assert tag == image_tag() == f"rollforge-sandbox:{recipe_digest()}"
    assert ensure_image(client) == tag
    changed = dict(RECIPE, include=["python3", "curl"])
    assert recipe_digest(changed) != recipe_digest()


def test_cli_exec_docker_prints_one_json_record(tmp_path, client):
    f = tmp_path / "prog.py"
    f.write_text("import os\nprint(os.getuid())\n")
    p = subprocess.run([ROLLFORGE, "exec", "--backend", "docker", "--timeout", "10",
                        "--memory-mb", "128", "--pids", "16", str(f)],
                       capture_output=True, text=True, timeout=120)
    record = json.loads(p.stdout)
    assert p.returncode == 0, p.stderr
    assert (record["status"], record["stdout"], record["backend"]) == ("ok", "65534\n", "docker")


def test_containers_of_a_crashed_owner_are_reaped_by_the_next_sandbox(client):
    crash = ("import os\nfrom sandbox.docker_backend import DockerSandbox\n"
             "from sandbox.docker_container import owner_id\n"
             "s = DockerSandbox(pool_size=2)\nprint(owner_id(), flush=True)\n"
             "os._exit(1)  # no atexit, no close(): a crash\n")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.run([sys.executable, "-c", crash], capture_output=True, text=True,
                       timeout=120, cwd=repo)
    crashed = p.stdout.strip()
    by_crashed = {"label": f"{OWNER_LABEL}={crashed}"}
    assert crashed and len(client.containers.list(all=True, filters=by_crashed)) == 2, p.stderr
    from sandbox.docker_backend import DockerSandbox

    DockerSandbox(pool_size=0).close()  # making a sandbox runs the reaper
    assert client.containers.list(all=True, filters=by_crashed) == []
