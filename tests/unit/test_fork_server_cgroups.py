"""A zygote's cgroups serve one execution after another: each run still gets its own limits, its
own OOM verdict and its own peak memory, and nothing of a run is left in the group for the next."""
from __future__ import annotations

import os

import pytest

from sandbox.base import Limits
from sandbox.cgroups import LEFTOVER_BYTES
from fork_server_common import run_py

_BIG = "x = bytearray(200 << 20)\nfor i in range(0, len(x), 4096):\n    x[i] = 1\nprint('done')\n"


@pytest.fixture
def cgroup_fast(fast):
    if not (fast.host.memory_cgroup and fast.host.pids_cgroup):
        pytest.skip("no writable cgroup v1 memory and pids hierarchies here")
    fast.fork_server.close()  # one fresh zygote for the test
    return fast


def test_executions_on_one_zygote_reuse_its_group_instead_of_making_one_each(cgroup_fast):
    show = "print(open('/proc/self/cgroup').read())\n"
    seen = set()
    for _ in range(4):
        r = run_py(cgroup_fast, show, Limits(timeout_s=10))
        assert r.status == "ok", r
        lines = [ln for ln in r.stdout.splitlines() if ":memory:" in ln or ":pids:" in ln]
        assert len(lines) == 2, r.stdout
        seen.add(tuple(sorted(lines)))
    assert len(seen) == 1, seen


def _group(sb) -> tuple:
    r = run_py(sb, "print(open('/proc/self/cgroup').read())\n", Limits(timeout_s=10))
    return tuple(sorted(ln for ln in r.stdout.splitlines() if ":memory:" in ln or ":pids:" in ln))


def test_a_recycled_group_gives_each_run_its_own_memory_limit_and_oom_verdict(cgroup_fast):
    roomy, tight = Limits(timeout_s=20, memory_mb=512), Limits(timeout_s=20, memory_mb=128)
    first = run_py(cgroup_fast, _BIG, roomy)
    assert first.status == "ok" and first.stdout == "done\n", first
    before = _group(cgroup_fast)
    oom = run_py(cgroup_fast, _BIG, tight)
    assert oom.status == "memory_exceeded", oom
    # The OOM kill above stays in the group's counter; this run's verdict must not inherit it
    # (and it is the same group: the test is about a recycled one, not a fresh one).
    after = run_py(cgroup_fast, "print('small')\n", tight)
    assert after.status == "ok" and after.stdout == "small\n", after
    assert _group(cgroup_fast) == before
    again = run_py(cgroup_fast, _BIG, roomy)
    assert again.status == "ok" and again.stdout == "done\n", again


def test_a_recycled_group_reports_each_runs_own_peak_memory(cgroup_fast):
    big = run_py(cgroup_fast, _BIG, Limits(timeout_s=20, memory_mb=512))
    small = run_py(cgroup_fast, "pass\n", Limits(timeout_s=10, memory_mb=512))
    assert big.status == small.status == "ok"
    assert big.peak_memory_mb >= 200, big
    # at most what the small run touched plus what a recycled group may still hold charged
    assert small.peak_memory_mb < 16 + LEFTOVER_BYTES / (1 << 20), small


def _stdlib_sources() -> list[str]:
    root = os.path.dirname(os.__file__)  # the interpreter's standard library, bound read-only
    return sorted(os.path.join(d, n) for d, _, names in os.walk(root) for n in names
                  if n.endswith(".py"))


def test_a_run_that_leaves_page_cache_charged_gets_the_next_run_a_fresh_group(cgroup_fast):
    # Reading files the host has not cached charges their page cache to the run's group, and it
    # outlives the run: the next run must not be charged for it (nor see it in its peak).
    sources = _stdlib_sources()
    for path in sources:  # out of the page cache, so that the run's reads are charged to it
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    reader = ("import sys\nn = 0\nfor p in sys.argv[1:]:\n    with open(p, 'rb') as fh:\n"
              "        n += len(fh.read())\nprint(n >> 20)\n")
    first = cgroup_fast.run({"main.py": reader}, ["python", "main.py", *sources],
                            Limits(timeout_s=30, memory_mb=512))
    assert first.status == "ok" and int(first.stdout) >= 8, first
    assert first.peak_memory_mb >= 8, first
    nxt = run_py(cgroup_fast, "pass\n", Limits(timeout_s=10, memory_mb=512))
    assert nxt.status == "ok"
    assert nxt.peak_memory_mb < 16 + LEFTOVER_BYTES / (1 << 20), nxt


def test_a_recycled_group_gives_each_run_its_own_process_limit(cgroup_fast):
    spawn = ("import os\nkids = []\nfor _ in range({n}):\n    pid = os.fork()\n"
             "    if pid == 0:\n        import time; time.sleep(5); os._exit(0)\n"
             "    kids.append(pid)\nprint(len(kids))\n")
    few = run_py(cgroup_fast, spawn.format(n=20), Limits(timeout_s=10, pids=8))
    assert few.status != "ok" and "BlockingIOError" in few.stderr, few
    many = run_py(cgroup_fast, spawn.format(n=20), Limits(timeout_s=10, pids=64))
    assert many.status == "ok" and many.stdout == "20\n", many
    # the sleeping children of the run above were killed with it: this run starts with none
    few_again = run_py(cgroup_fast, spawn.format(n=4), Limits(timeout_s=10, pids=8))
    assert few_again.status == "ok" and few_again.stdout == "4\n", few_again
