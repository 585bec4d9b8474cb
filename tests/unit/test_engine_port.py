"""A managed engine server whose chosen port is taken before it binds it starts again on
another port; one whose port the user fixed, or that fails for another reason, is an error.
The "server" is a stand-in module run by the engine venv's interpreter (no vLLM needed): it
fails its first start with vLLM's bind error and then answers /health."""
import os
import sys
from pathlib import Path

import pytest

from engine.vllm_server import EngineError, ServerSettings, VLLMServer

FAKE = r'''
import http.server, os, sys
marker = os.environ["FAKE_MARKER"]
port = int(sys.argv[sys.argv.index("--port") + 1])
with open(marker, "a") as fh:
    fh.write(f"{port}\n")
broken = os.environ.get("FAKE_MODE") == "broken"
if broken or len(open(marker).read().split()) == 1:
    print("OSError: [Errno 98] error while attempting to bind on address "
          "('127.0.0.1', %d): Address already in use" % port, flush=True)
    sys.exit(3 if broken else 1)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


@pytest.fixture
def fake_engine(tmp_path):
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    os.symlink(os.path.realpath(sys.executable), venv / "python")
    mod = tmp_path / "mods" / "vllm" / "entrypoints" / "openai"
    mod.mkdir(parents=True)
    for d in (mod.parent.parent, mod.parent, mod):
        (d / "__init__.py").write_text("")
    (mod / "api_server.py").write_text(FAKE)
    return tmp_path


def _settings(root: Path, mode: str = "", **kw) -> ServerSettings:
    return ServerSettings("model", venv=str(root / "venv"), log_dir=str(root / "logs"),
                          start_timeout_s=60, extra_env={"PYTHONPATH": str(root / "mods"),
                                                         "FAKE_MARKER": str(root / "ports"),
                                                         "FAKE_MODE": mode}, **kw)


def test_a_chosen_port_taken_before_the_bind_is_given_up_for_another(fake_engine):
    server = VLLMServer(_settings(fake_engine))
    try:
        server.start()
        ports = (fake_engine / "ports").read_text().split()
        assert len(ports) == 2 and ports[0] != ports[1]
        assert server.base_url == f"http://127.0.0.1:{ports[1]}"
        assert server.alive()
    finally:
        server.stop()


def test_a_port_the_user_fixed_is_not_swapped_for_another(fake_engine):
    from engine.vllm_server import free_port

    server = VLLMServer(_settings(fake_engine, port=free_port()))
    with pytest.raises(EngineError, match="exited with code 1 while starting"):
        server.start()
    assert len((fake_engine / "ports").read_text().split()) == 1


def test_a_server_that_keeps_failing_to_bind_is_an_error_after_three_ports(fake_engine):
    server = VLLMServer(_settings(fake_engine, mode="broken"))
    with pytest.raises(EngineError, match="exited with code 3 while starting") as exc:
        server.start()
    assert "Address already in use" in str(exc.value)
    assert len(set((fake_engine / "ports").read_text().split())) == 3
