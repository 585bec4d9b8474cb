"""A session with an OpenEnv environment server, over the protocol its own `EnvClient` speaks
(openenv-core 0.3.0, `openenv/core/env_client.py`): one WebSocket at `<url>/ws` per session (the
server makes one environment instance per connection), JSON messages `{"type": "reset", "data":
{reset args}}`, `{"type": "step", "data": {action}}`, `{"type": "close"}`, answered by
`{"type": "observation", "data": {"observation": {...}, "reward": r, "done": d}}` or
`{"type": "error", "data": {"message", "code"}}`. The server's HTTP `/reset` and `/step` make a
fresh environment per request (no episode across them), so a multi-step episode needs this.

Written against .venv's `websockets` so that neither the flow nor a worker imports openenv
(its package lives in the kind's own venv: envs/openenv/setup_venv.sh). The schema of the
environment's actions comes from the server's `GET /schema`.
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from envs.base import EnvError


class ServerUnreachable(EnvError):
    """Nothing answers at the server's address (a wrong URL, a server that is down)."""


class EnvRaised(EnvError):
    """The environment's own code raised (the server's EXECUTION_ERROR, FACTORY_ERROR, ...)."""


class ActionRefused(EnvError):
    """The server refused the action: it does not fit the environment's action schema."""


@dataclass(frozen=True)
class Observed:
    """What a reset or a step returned: the observation's fields, the reward, whether done."""

    observation: dict[str, Any]
    reward: float | None
    done: bool


def ws_url(url: str) -> str:
    """The session endpoint of a server at `url` (http(s):// or ws(s)://)."""
    u = url.rstrip("/")
    for http, ws in (("http://", "ws://"), ("https://", "wss://")):
        if u.startswith(http):
            u = ws + u[len(http):]
    return u + "/ws"


def http_url(url: str) -> str:
    u = url.rstrip("/")
    for ws, http in (("ws://", "http://"), ("wss://", "https://")):
        if u.startswith(ws):
            u = http + u[len(ws):]
    return u


def get_json(url: str, path: str, timeout_s: float) -> Any:
    """`GET url/path` as JSON; ServerUnreachable when nothing answers."""
    try:
        with urllib.request.urlopen(http_url(url) + path, timeout=timeout_s) as resp:  # noqa: S310
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ServerUnreachable(f"OpenEnv server at {url}: GET {path} failed: "
                                f"{type(exc).__name__}: {exc}") from None


class Session:
    """One environment instance on the server, for one episode: `with Session(url) as s:`."""

    def __init__(self, url: str, timeout_s: float = 30.0, busy_wait_s: float = 30.0) -> None:
        self.url, self.timeout_s, self.busy_wait_s = url, timeout_s, busy_wait_s
        self._ws = None

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _connect(self):
        from websockets.sync.client import connect  # noqa: PLC0415

        try:
            # proxy=None: a loopback server must not go through a proxy the environment names
            return connect(ws_url(self.url), open_timeout=self.timeout_s, proxy=None,
                           max_size=64 << 20)
        except Exception as exc:  # refused, DNS, a handshake that is not a WebSocket ...
            raise ServerUnreachable(f"OpenEnv server at {self.url} did not answer "
                                    f"({ws_url(self.url)}): {type(exc).__name__}: {exc}") from None

    def _ask(self, message: dict) -> dict:
        """Send one message and read its answer. A server at capacity (a session per
        connection, one by default) answers a new connection with CAPACITY_REACHED and closes
        it, maybe before our message is read: wait and connect again, up to `busy_wait_s`.
        Only a session's first message is sent again: a later one belongs to the episode the
        dropped connection held."""
        deadline = time.monotonic() + self.busy_wait_s
        delay = 0.05
        while True:
            fresh = self._ws is None
            if fresh:
                self._ws = self._connect()
            try:
                self._ws.send(json.dumps(message))
                raw = self._ws.recv(timeout=self.timeout_s)
            except TimeoutError:
                raise EnvRaised(f"OpenEnv server at {self.url}: no answer to "
                                f"{message['type']!r} within {self.timeout_s:g} s") from None
            except Exception as exc:  # the connection dropped
                self._drop()
                if fresh and time.monotonic() < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
                    continue
                raise ServerUnreachable(f"OpenEnv server at {self.url}: the session ended on "
                                        f"{message['type']!r}: {type(exc).__name__}: {exc}"
                                        ) from None
            try:
                reply = json.loads(raw)
            except ValueError:
                raise EnvRaised(f"OpenEnv server at {self.url}: an answer that is not JSON: "
                                f"{str(raw)[:200]!r}") from None
            if not isinstance(reply, dict):
                raise EnvRaised(f"OpenEnv server at {self.url}: an answer that is not an "
                                f"object: {str(raw)[:200]!r}")
            data = reply.get("data") if isinstance(reply.get("data"), dict) else {}
            if reply.get("type") == "error" and data.get("code") == "CAPACITY_REACHED" \
                    and fresh and time.monotonic() < deadline:
                self._drop()
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            return reply

    def _observed(self, reply: dict, what: str) -> Observed:
        data = reply.get("data") if isinstance(reply.get("data"), dict) else {}
        if reply.get("type") == "error":
            code, msg = data.get("code", "UNKNOWN"), data.get("message", "")
            if code == "VALIDATION_ERROR":
                errors = "; ".join(f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg')}"
                                   for e in data.get("errors") or [] if isinstance(e, dict))
                raise ActionRefused(f"OpenEnv server at {self.url} refused the {what}: "
                                    f"{errors or msg}")
            if code == "CAPACITY_REACHED":
                raise ServerUnreachable(f"OpenEnv server at {self.url}: every session is busy "
                                        f"after {self.busy_wait_s:g} s ({msg})")
            raise EnvRaised(f"OpenEnv environment at {self.url} failed on {what} ({code}): {msg}")
        obs = data.get("observation")
        reward = data.get("reward")
        if reply.get("type") != "observation" or not isinstance(obs, dict) \
                or not (reward is None or isinstance(reward, (int, float))):
            raise EnvRaised(f"OpenEnv server at {self.url}: {what} answered with no "
                            f"observation: {json.dumps(reply)[:300]}")
        return Observed(obs, None if reward is None else float(reward), bool(data.get("done")))

    def reset(self, args: dict[str, Any]) -> Observed:
        return self._observed(self._ask({"type": "reset", "data": dict(args)}), "reset")

    def step(self, action: dict[str, Any]) -> Observed:
        return self._observed(self._ask({"type": "step", "data": dict(action)}), "step")

    def _drop(self) -> None:
        try:
            self._ws.close()
        except Exception:  # noqa: BLE001 - closing a dead connection
            pass
        self._ws = None

    def close(self) -> None:
        if self._ws is not None:
            try:
                self._ws.send(json.dumps({"type": "close"}))
            except Exception:  # noqa: BLE001 - best effort, as openenv's own client
                pass
            self._drop()
