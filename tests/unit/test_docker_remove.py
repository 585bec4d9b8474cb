"""Removing a sandbox container retries what a busy engine refuses for a moment, and takes a
container already gone as removed (no engine needed: the engine's answers are stood in for)."""
import logging

import pytest

docker_errors = pytest.importorskip("docker.errors")

from sandbox import docker_container  # noqa: E402


class _Flaky:
    id = "0123456789abcdef"

    def __init__(self, failures: int, gone: bool = False) -> None:
        self.failures, self.gone, self.calls = failures, gone, 0

    def remove(self, force: bool) -> None:
        assert force
        self.calls += 1
        if self.gone:
            raise docker_errors.NotFound("no such container")
        if self.calls <= self.failures:
            raise docker_errors.APIError("tried to kill container, but did not receive an exit "
                                         "event")


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch):
    monkeypatch.setattr(docker_container.time, "sleep", lambda s: None)


def test_a_refused_removal_is_tried_again_until_it_goes():
    c = _Flaky(failures=2)
    assert docker_container.remove_container(c) is True
    assert c.calls == 3


def test_a_container_already_gone_counts_as_removed():
    c = _Flaky(failures=0, gone=True)
    assert docker_container.remove_container(c) is True and c.calls == 1


def test_a_container_that_will_not_go_is_reported_not_raised(caplog):
    c = _Flaky(failures=99)
    with caplog.at_level(logging.WARNING, logger="sandbox.docker_container"):
        assert docker_container.remove_container(c, attempts=3) is False
    assert c.calls == 3
    assert "could not remove sandbox container 0123456789ab" in caplog.text
