"""The gateway's HTTP routes (FastAPI) and how it is served (uvicorn): `/v1/models`,
`/v1/completions`, `/v1/chat/completions`. Every route needs the key; every error, FastAPI's
own included, is answered in OpenAI's error shape."""
from __future__ import annotations

import json
import socket
import threading

import anyio
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gateway import openai_api as api
from gateway.app import EPISODE_HEADER, Gateway


def _error(exc: api.GatewayError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def _chunks(resp: dict, chat: bool, include_usage: bool):
    """A whole answer as server-sent events: the gateway samples the request to its end first
    (the boundary returns whole completions), then sends one chunk per choice."""
    base = {"id": resp["id"], "created": resp["created"], "model": resp["model"],
            "object": "chat.completion.chunk" if chat else "text_completion"}
    for c in resp["choices"]:
        if chat:
            choice = {"index": c["index"], "delta": {"role": "assistant",
                                                      "content": c["message"]["content"]},
                      "logprobs": c["logprobs"], "finish_reason": c["finish_reason"],
                      "token_ids": c["token_ids"]}
        else:
            choice = c
        yield f"data: {json.dumps({**base, 'choices': [choice]})}\n\n"
    if include_usage:
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': resp['usage']})}\n\n"
    yield "data: [DONE]\n\n"


async def _body(request: Request) -> dict:
    try:
        body = json.loads(await request.body())
    except ValueError as exc:
        raise api.GatewayError(400, f"the body is not JSON: {exc}", "invalid_json") from None
    if not isinstance(body, dict):
        raise api.GatewayError(400, "the body must be a JSON object", "invalid_json")
    return body


def make_app(gw: Gateway) -> FastAPI:
    app = FastAPI(title="rollforge gateway", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(api.GatewayError)
    async def _gateway_error(_request: Request, exc: api.GatewayError):
        return _error(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(api.GatewayError(exc.status_code, str(exc.detail), code))

    @app.get("/v1/models")
    async def models(request: Request):
        gw.authorize(request)
        gw.current_version()  # a following gateway lists the version that answers now
        return {"object": "list", "data": [{"id": m, "object": "model", "created": 0,
                                            "owned_by": "rollforge"} for m in gw.models]}

    async def answer(request: Request, chat: bool):
        gw.authorize(request)
        body = await _body(request)
        episode = gw.episode_of(request)
        fn = gw.chat if chat else gw.completions
        resp, turn = await anyio.to_thread.run_sync(fn, body, episode)
        headers = {EPISODE_HEADER: episode, "X-Turn-Index": str(turn)}
        if body.get("stream"):
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(_chunks(resp, chat, usage), media_type="text/event-stream",
                                     headers=headers)
        return JSONResponse(resp, headers=headers)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await answer(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await answer(request, chat=True)

    # The run's own tasks as episodes (gateway/play.py): open one, then step it with the
    # client's actions; the environment's reset, step and grade run in a worker thread (a
    # step is a sandbox run, seconds long), never on the event loop.
    @app.post("/v1/rollforge/episodes")
    async def open_episode(request: Request):
        gw.authorize(request)
        play = gw.episodes()
        return JSONResponse(await anyio.to_thread.run_sync(play.open, await _body(request)))

    @app.post("/v1/rollforge/episodes/{episode_id}/step")
    async def step_episode(episode_id: str, request: Request):
        gw.authorize(request)
        play, body = gw.episodes(), await _body(request)
        return JSONResponse(await anyio.to_thread.run_sync(play.step, episode_id, body))

    return app


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: a free one, read back with getsockname)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


class Served:
    """A gateway served from a thread of this process (tests, notebooks): `url`, `stop()`."""

    def __init__(self, gw: Gateway, host: str = "127.0.0.1", port: int = 0):
        self.sock = bind(host, port)
        h, p = self.sock.getsockname()[:2]
        self.url = f"http://{h if ':' not in h else f'[{h}]'}:{p}/v1"
        self.server = uvicorn.Server(uvicorn.Config(make_app(gw), log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True)
        self.thread.start()
        while not self.server.started and self.thread.is_alive():
            self.thread.join(0.05)
        if not self.server.started:
            raise RuntimeError("the gateway's server did not start (see the log above)")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
