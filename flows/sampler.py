"""Who samples a run's policy (`sampling.engine`), kept in step with the policy's versions.

`local`: the policy in this process (engine.boundary.LocalSampler), loaded per version.
`vllm`: one vLLM server per run and process, started at the first sample stage that needs it
and stopped by `close_engines` when the flow ends (a server rollforge started never outlives
the process: engine/vllm_server.py). Before a version samples, the server is brought to it:

    full weights:            version v's checkpoint folder loaded into the running server in
                             place (vLLM's reload_weights through its development route
                             /collective_rpc, then /reset_prefix_cache): 1.5-6 s against a
                             restart's 80-105 s for SmolLM2-135M on this CPU; the server's
                             log-probs of a fixed probe must then differ from v-1's, else (a
                             load that changed nothing, an error) the server is restarted on v
                             (`sampling.engine_full_sync`; engine/sync_fallbacks)
    LoRA, merged (default):  v's adapter folded into the base (<run>/engine/merged-v<v>), that
                             folder loaded the same way: vLLM's CPU build decodes 3.3x faster
                             without an adapter than through one
    LoRA, adapter:           the base served once; v's adapter loaded as `<run_id>-v<v>` at run
                             time, the one before unloaded: a tenth of a second, no restart

A version change waits for the requests in flight at the old version to finish, so every
completion is of the version its row names. The seconds each sync took are `engine/sync_s` of
the iteration, the in-place ones counted in `engine/sync_in_place`. When a managed server dies
mid-stage (killed, crashed), the stage restarts it, syncs it, and samples the whole request
again: a stage's result is all of its completions or none, so no row is lost or duplicated.
A server at `sampling.engine_url` is someone else's: rollforge never starts, restarts or stops
it, and when it is gone the stage fails (and is retried by its stage policy). Versions reach it
as LoRA adapters (the default for a LoRA policy) or as full weights (a full policy, or a merged
LoRA version) loaded in place, the only way in: a failed or unchanged load fails the stage. Its
first load has no version of this process to differ from (the server may hold those very
weights already), so it is taken on the server's word; every later one is checked by the probe.

Test hook: ROLLFORGE_FAULT_KILL_ENGINE="<version>:<n>:<marker file>" SIGKILLs the managed
server's process group once, in this process's n-th request for that version (1-based), after
the server is synced to it and before the request reaches it; the marker file records the pid
it killed. A test so kills the server inside a chosen stage without racing a fast one.
"""
from __future__ import annotations

import functools
import logging
import os
import shutil
import signal
import threading
import time
from collections import defaultdict
from pathlib import Path

from engine.boundary import Completion, LocalSampler, SampleRequest
from engine.vllm_sampler import VLLMSampler
from engine.vllm_server import (DEV_MODE_ENV, EngineError, ServerSettings, VLLMServer,
                                lora_settings)
from flows.config import RunConfig
from training import checkpoints
from training.lora import base_path

log = logging.getLogger(__name__)

FAULT_ENV = "ROLLFORGE_FAULT_KILL_ENGINE"
ENGINE_RESTARTS = 2  # restarts of a dead managed server within one stage before it fails
# The text whose log-probs tell an in-place load that changed nothing (a silent no-op) from one
# that loaded the new weights: any update moves an fp32 log-prob of a few dozen tokens.
PROBE_TEXT = "def add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n    return a + b\n"


def model_dir(run_dir: str, version: int) -> Path:
    return checkpoints.checkpoint_dir(run_dir, version) / "model"


def preflight(cfg: RunConfig) -> None:
    """Refuse a run whose engine cannot exist before anything starts (EngineError naming what
    to run): `sampling.engine: vllm` without an engine_url needs the engine's venv."""
    if cfg.sampling.engine == "vllm" and not cfg.sampling.engine_url:
        from engine.vllm_server import engine_python  # noqa: PLC0415

        try:
            engine_python()
        except EngineError as exc:
            raise EngineError(f"sampling.engine is vllm: {exc}") from None


@functools.lru_cache(maxsize=4)
def policy_tokenizer(run_dir: str, version: int):
    """The tokenizer saved with a version (the one its policy loads with), without the model."""
    from training.tokenizer import load_tokenizer  # noqa: PLC0415

    return load_tokenizer(str(model_dir(run_dir, version)))


def sample(cfg: RunConfig, version: int, request: SampleRequest, progress=None) -> list[Completion]:
    """`request` sampled by the run's engine at policy `version` (prompt-major completions)."""
    if cfg.sampling.engine == "local":
        from training.trainer import policy_for_sampling  # noqa: PLC0415

        return LocalSampler(policy_for_sampling(cfg.run_dir, version),
                            cfg.sampling.batch_size).sample(request, progress)
    return engine_for(cfg).sample(version, request, progress)


def play_options(cfg: RunConfig) -> dict:
    """How `flows.episodes.play` schedules the run's turns (`sampling.turns`): `auto` is
    per_episode for an engine and synchronous for the local sampler, whose batches would
    otherwise depend on when steps return (and its seeded samples with them). An engine takes
    concurrent calls and batches them itself; the local sampler takes one at a time."""
    s = cfg.sampling
    turns = s.turns if s.turns != "auto" else (
        "synchronous" if s.engine == "local" else "per_episode")
    return {"turns": turns, "concurrent": s.engine != "local"}


def grouped(request: SampleRequest) -> list[tuple[list[int], SampleRequest]]:
    """A request of n=1 prompts split so that equal prompts go together as one prompt with
    n = their count (the engine prefills a group's prompt once): [(positions, request)], where
    the request's completions, prompt-major, belong to `positions` in that order."""
    if request.n != 1:
        return [(list(range(request.size)), request)]
    where: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for i, p in enumerate(request.prompts):
        where[p].append(i)
    by_count: dict[int, list[tuple[int, ...]]] = defaultdict(list)
    for p, idx in where.items():
        by_count[len(idx)].append(p)
    out = []
    for n, prompts in sorted(by_count.items()):
        positions = [i for p in prompts for i in where[p]]
        out.append((positions, SampleRequest(prompts, n, request.temperature, request.top_p,
                                             request.max_new_tokens, request.stop, request.greedy)))
    return out


class RunEngine:
    """A run's vLLM server and the policy version it serves."""

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self.server: VLLMServer | None = None
        self.version: int | None = None
        self.adapter: str | None = None  # the loaded adapter requests name (LoRA policies)
        self.banned: tuple[int, ...] = ()
        self.syncs: list[float] = []  # seconds of each sync to a new version (engine/sync_s)
        self.restarts = 0  # restarts of a dead server (engine/restarts)
        self.in_place = 0  # syncs that loaded full weights into the running server
        self.fallbacks = 0  # in-place loads that failed and became restarts
        self._probe: tuple[list[int], list[float]] | None = None  # ids, the served version's
        # one sync at a time: two callers finding the server dead must not start two servers
        self._sync_lock = threading.Lock()
        # requests sampling now; a version change waits for them (under _sync_lock, so no new
        # one starts meanwhile)
        self._in_flight = 0
        self._idle = threading.Condition()

    # -- settings ------------------------------------------------------------------------
    def _lora(self) -> bool:
        """Whether versions reach the server as adapters loaded at run time."""
        s = self.cfg.sampling
        return self.cfg.policy.lora_rank > 0 and (
            s.engine_lora_sync == "adapter" or (s.engine_lora_sync is None and bool(s.engine_url)))

    def _merged(self, version: int) -> str:
        """A LoRA version folded into its base, as `rollforge export` writes it (tokenizer
        included), under <run>/engine/; the versions before it are deleted."""
        from training.export import export_checkpoint  # noqa: PLC0415

        root = Path(self.cfg.run_dir) / "engine"
        out = root / f"merged-v{version:04d}"
        if not (out / "config.json").is_file():
            export_checkpoint(self.cfg.run_dir, version, str(out), overwrite=True)
        for old in root.glob("merged-v*"):
            if old != out:
                shutil.rmtree(old, ignore_errors=True)
        return str(out)

    def _base(self, version: int) -> str:
        """The base model folder a LoRA version's adapter adapts (its `rollforge_base.json`)."""
        from training.pretrained import resolve  # noqa: PLC0415

        base = resolve(base_path(str(model_dir(self.cfg.run_dir, version)))
                       or self.cfg.policy.model_path or "")
        if not Path(base).is_dir():
            raise EngineError(f"the vLLM engine serves a Hugging Face model folder; the policy's base "
                              f"is {base!r}: convert it first (`rollforge model convert`) and set "
                              "policy.model_path to the folder")
        return base

    def _settings(self, model: str, tokenizer: str | None) -> ServerSettings:
        s, cfg = self.cfg.sampling, self.cfg
        threads = s.engine_threads or (cfg.threads.torch if isinstance(cfg.threads.torch, int)
                                       else len(os.sched_getaffinity(0)))
        extra, env = lora_settings(cfg.policy.lora_rank) if self._lora() else ((), {})
        if not self._lora() and s.engine_full_sync != "restart":
            env = {**env, **DEV_MODE_ENV}
        if tokenizer:
            extra = (*extra, "--tokenizer", tokenizer)
        return ServerSettings(model=model, threads=threads, kv_cache_gib=s.engine_kv_cache_gib,
                              max_num_seqs=s.engine_max_num_seqs, max_model_len=cfg.policy.max_len,
                              seed=cfg.seed, log_dir=str(Path(cfg.run_dir) / "engine"),
                              extra_args=extra, extra_env=env)

    def _byte_tokenizer(self) -> str:
        """The byte tokenizer as Hugging Face files (the server needs one for stop strings)."""
        from training.tokenizer import byte_tokenizer_hf  # noqa: PLC0415

        out = Path(self.cfg.run_dir) / "engine" / "byte-tokenizer"
        if not (out / "tokenizer.json").is_file():  # written aside, then renamed into place
            tmp = out.with_name(f".{out.name}-{os.getpid()}")
            byte_tokenizer_hf().save_pretrained(str(tmp))
            # vLLM reads a tokenizer folder's config.json too (it retries for seconds without one)
            shutil.copy(model_dir(self.cfg.run_dir, 0) / "config.json", tmp / "config.json")
            try:
                os.rename(tmp, out)
            except OSError:  # another process's is there already
                shutil.rmtree(tmp, ignore_errors=True)
        return str(out)

    # -- lifecycle -----------------------------------------------------------------------
    def _start(self, version: int) -> None:
        path = model_dir(self.cfg.run_dir, version)
        tok = policy_tokenizer(self.cfg.run_dir, version)
        self.banned = tuple(tok.banned_ids)
        if self.cfg.sampling.engine_url:
            if self.server is None:
                self.server = VLLMServer.connect(self.cfg.sampling.engine_url)
            return
        if self._lora():
            model, tokenizer = self._base(version), None
        elif self.cfg.policy.lora_rank > 0:
            model, tokenizer = self._merged(version), None
        else:
            model, tokenizer = str(path), (self._byte_tokenizer() if tok.kind == "byte" else None)
        if self.server is not None:
            self.server.stop()
        self.server = VLLMServer(self._settings(model, tokenizer)).start()
        self.adapter = None

    def _weights(self, version: int) -> str:
        """The folder a full-weights (or merged LoRA) server serves version `version` from."""
        # absolute: a server at engine_url runs elsewhere, in a directory of its own
        if self.cfg.policy.lora_rank > 0:
            return str(Path(self._merged(version)).resolve())
        return str(model_dir(self.cfg.run_dir, version).resolve())

    def _reload(self, version: int) -> bool:
        """Load `version` into the running server in place and check it took; False (after a
        warning) when it did not and the server must be restarted on it instead, an EngineError
        where that cannot be (`in_place`, a server at engine_url)."""
        mode = self.cfg.sampling.engine_full_sync
        if mode == "restart":
            return False
        remote = bool(self.cfg.sampling.engine_url)
        ids = list(policy_tokenizer(self.cfg.run_dir, version).encode(PROBE_TEXT))
        try:
            if self._probe is None and not remote:  # the served version's, before the load
                self._probe = ids, self.server.prompt_logprobs(ids)
            self.server.reload_weights(self._weights(version))
            after = self.server.prompt_logprobs(ids)
            if self._probe is not None and after == self._probe[1]:
                raise EngineError(f"the server's log-probs of the probe are those of the version "
                                  f"it served before to the last bit after loading v{version}: "
                                  "the load changed nothing")
        except EngineError as exc:
            # the weights served are unknown now. A managed server: the stage's retry starts a
            # fresh one. A server at engine_url cannot be restarted: the retry loads again,
            # checked against the last version known to have loaded (the probe kept)
            self.version = None
            if remote:
                raise
            self._probe = None
            if mode == "in_place":
                raise
            self.fallbacks += 1
            log.warning("loading v%d into the vLLM server in place failed (%s): restarting it on "
                        "v%d", version, exc, version)
            return False
        self._probe = ids, after
        self.in_place += 1
        return True

    def _wait_idle(self) -> None:
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0)

    def sync(self, version: int) -> None:
        """Bring the server to `version` (start it on first use). The caller holds _sync_lock."""
        if self.server is not None and self.server.managed and not self.server.alive():
            self.restarts += 1  # died since it last sampled: the start below replaces it
            log.warning("the vLLM server died (log %s): starting a new one", self.server.log_path)
            self.server.stop()
            self.server, self.version, self.adapter = None, None, None
        if self.version == version and self.server is not None:
            return
        self._wait_idle()  # nothing of the old version is still being sampled
        t = time.perf_counter()
        lora = self._lora()
        how = "restarted"
        if self.cfg.sampling.engine_url:
            if self.server is None:
                self._start(version)  # connects
            if not lora:
                self._reload(version)  # in place or not at all: raises when it did not take
                how = "loaded in place"
        elif self.server is None or not lora:
            if self.server is not None and self.version is not None and self._reload(version):
                how = "loaded in place"
            else:
                self._probe = None
                self._start(version)
        if lora:
            how = "adapter loaded"
            name = f"{self.cfg.run_id}-v{version}"  # a shared server may hold other runs'
            self.server.load_adapter(name, model_dir(self.cfg.run_dir, version).resolve())
            old, self.adapter = self.adapter, name
            if old is not None and old != name:
                self.server.unload_adapter(old)
        self.version = version
        self.syncs.append(time.perf_counter() - t)
        log.info("engine at %s serves policy v%d (%s in %.1fs)", self.server.base_url,
                 version, how, self.syncs[-1])

    def sample(self, version: int, request: SampleRequest, progress=None) -> list[Completion]:
        for attempt in range(ENGINE_RESTARTS + 1):
            s = None
            try:
                with self._sync_lock:
                    self.sync(version)
                    _arm_fault(self.server, version)
                    # the server this call talks to: another caller may replace it meanwhile
                    s, adapter = self.server, self.adapter
                    with self._idle:
                        self._in_flight += 1
                try:
                    sampler = VLLMSampler(s, self.banned, model_name=adapter)
                    return _scatter(request, [(pos, sampler.sample(req, progress))
                                              for pos, req in grouped(request)])
                finally:
                    with self._idle:
                        self._in_flight -= 1
                        self._idle.notify_all()
            except EngineError:
                if s is None or not s.managed or s.alive() or attempt == ENGINE_RESTARTS:
                    raise
                # the next sync finds it dead (or another caller has replaced it already) and
                # the request is sampled again
        raise AssertionError("unreachable")

    def take_metrics(self) -> dict:
        """engine/* metrics since the last call (an iteration's)."""
        out = {"engine/syncs": len(self.syncs), "engine/restarts": self.restarts,
               "engine/sync_in_place": self.in_place, "engine/sync_fallbacks": self.fallbacks}
        if self.syncs:
            out["engine/sync_s"] = sum(self.syncs)
        self.syncs, self.restarts, self.in_place, self.fallbacks = [], 0, 0, 0
        return out

    def close(self) -> None:
        """Stop the server this engine started, and delete its merged copies: a full model
        each, rebuilt from the checkpoint when needed again (an evaluation left one behind
        per evaluation, 0.5 GB each for SmolLM2)."""
        if self.server is not None:
            self.server.stop()
        self.server, self.version, self.adapter, self._probe = None, None, None, None
        for old in (Path(self.cfg.run_dir) / "engine").glob("merged-v*"):
            shutil.rmtree(old, ignore_errors=True)


_fault_calls: dict[int, int] = defaultdict(int)  # requests per version (the test hook's count)


def _arm_fault(server: VLLMServer | None, version: int) -> None:
    """The test hook of the module docstring."""
    spec = os.environ.get(FAULT_ENV)
    if not spec or server is None or server.proc is None:
        return
    version_s, nth, marker = spec.split(":", 2)
    if int(version_s) != version:
        return
    _fault_calls[version] += 1
    if _fault_calls[version] != int(nth) or Path(marker).exists():
        return
    Path(marker).write_text(str(server.proc.pid))
    os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait()


def _scatter(request: SampleRequest, parts) -> list[Completion]:
    """The grouped requests' completions back in the order of `request`'s prompts: slot `pos`
    of the prompt-major answer continues prompt `pos // n`."""
    out: list[Completion | None] = [None] * request.size
    for positions, comps in parts:
        for pos, c in zip(positions, comps):
            out[pos] = Completion(pos // request.n, c.token_ids, c.logprobs, c.finish_reason,
                                  c.text)
    assert all(c is not None for c in out)
    return out


_ENGINES: dict[str, RunEngine] = {}  # run folder -> its engine, in this process


def engine_for(cfg: RunConfig) -> RunEngine:
    key = str(Path(cfg.run_dir).resolve())
    eng = _ENGINES.get(key)
    if eng is None or eng.cfg.hash() != cfg.hash():
        if eng is not None:
            eng.close()
        eng = _ENGINES[key] = RunEngine(cfg)
    return eng


def engine_metrics(cfg: RunConfig) -> dict:
    """The run's engine/* metrics since the last call; {} for the local sampler."""
    eng = _ENGINES.get(str(Path(cfg.run_dir).resolve()))
    return eng.take_metrics() if eng is not None else {}


def close_engines() -> None:
    """Stop every server this process started (the flow's end)."""
    for eng in list(_ENGINES.values()):
        eng.close()
    _ENGINES.clear()
