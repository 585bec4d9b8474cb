"""Every hostile program is contained and reported by the Docker backend, the host is unharmed,
and the next execution (in the same warm container) works normally."""
from __future__ import annotations

import pytest

from sandbox.docker_container import engine_unavailable
from sandbox.hostile import HOSTILE, Listener, make_context, problems

pytestmark = [pytest.mark.integration, pytest.mark.docker]
_WHY = engine_unavailable()
if _WHY:
    pytest.skip(_WHY, allow_module_level=True)



@pytest.fixture(scope="module")
def sandbox():
    from sandbox.docker_backend import DockerSandbox

    sbx = DockerSandbox(pool_size=1, prewarm=None)  # one container: the next run reuses it
    yield sbx
    sbx.close()


@pytest.mark.parametrize("hostile", HOSTILE, ids=[h.name for h in HOSTILE])
def test_hostile_program_is_contained_and_next_execution_works(sandbox, tmp_path, monkeypatch,
                                                               hostile):
    listener = Listener()
    ctx = make_context(str(tmp_path), listener.port)
    monkeypatch.setenv("ROLLFORGE_TEST_SECRET", ctx.secret)
    try:
        result = sandbox.run({"main.py": ctx.fill(hostile)}, ["python", "main.py"],
                             hostile.limits)
        assert problems(hostile, result, ctx, listener.accepted) == [], result
        after = sandbox.run({"main.py": "import os\nprint(6 * 7, sorted(os.listdir('.')))"},
                            ["python", "main.py"], hostile.limits)
        assert (after.status, after.stdout) == ("ok", "42 ['main.py']\n"), after
    finally:
        listener.close()
