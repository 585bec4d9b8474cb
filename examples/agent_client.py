"""An agent that knows nothing of rollforge but the `openai` package and a base URL: it plays
episodes of a run's own tasks through `rollforge gateway --episodes` (gateway/README.md).

    export ROLLFORGE_GATEWAY_KEY=...        # the gateway's key
    python examples/agent_client.py --base-url http://127.0.0.1:8100/v1 --model tiny --episodes 4

Each episode: open it (POST /v1/rollforge/episodes: the episode id, the task's first
observation), ask the policy with the episode's id in `X-Episode-Id` (so the gateway records
the turn under it), send the reply as the action (POST /v1/rollforge/episodes/ID/step), and
go on with the next observation until the environment says done; the last answer carries the
kind's grade. One JSON line per episode on stdout. An error of the gateway (a wrong key, an
unknown episode) ends the script with its code on stderr and exit status 1.

Only the standard library and `openai` are imported: the two episode calls go through the
client's own `post` (openai's way to call endpoints it has no method for), so they carry the
same key and come back as the same error classes.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import openai


def ask(client: openai.OpenAI, args, episode: str, history: list[dict]) -> str:
    """The policy's reply to the conversation so far, asked under the episode's id."""
    headers = {"X-Episode-Id": episode}
    if args.api == "chat":
        r = client.chat.completions.create(model=args.model, messages=history,
                                           max_completion_tokens=args.max_tokens,
                                           temperature=args.temperature, extra_headers=headers)
        return r.choices[0].message.content or ""
    prompt = "".join(m["content"] for m in history)  # a completions policy continues the text
    r = client.completions.create(model=args.model, prompt=prompt, max_tokens=args.max_tokens,
                                  temperature=args.temperature, extra_headers=headers)
    return r.choices[0].text


def play(client: openai.OpenAI, args) -> dict:
    """One episode, start to grade."""
    body = {"task_id": args.task_id} if args.task_id else {}
    ep = client.post("/rollforge/episodes", cast_to=object, body=body)
    episode, history = ep["episode_id"], [{"role": "user", "content": ep["observation"]}]
    while True:
        reply = ask(client, args, episode, history)
        history.append({"role": "assistant", "content": reply})
        out = client.post(f"/rollforge/episodes/{episode}/step", cast_to=object,
                          body={"action": reply})
        if out["done"]:
            return {"episode_id": episode, "task_id": ep["task_id"], "kind": ep["kind"],
                    "turns": len(history) // 2, **{k: out[k] for k in (
                        "reward", "status", "solved", "rows")}}
        history.append({"role": "user", "content": out["observation"]})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True, help="the gateway, e.g. http://127.0.0.1:8100/v1")
    p.add_argument("--model", required=True, help="the served model name (the run id)")
    p.add_argument("--episodes", type=int, default=1, help="episodes to play (default 1)")
    p.add_argument("--task-id", default=None, help="play this task (default: the next in turn)")
    p.add_argument("--api", choices=("completions", "chat"), default="completions",
                   help="how to ask the policy (chat needs a chat template at the gateway)")
    p.add_argument("--max-tokens", type=int, default=None)
    p.add_argument("--temperature", type=float, default=1.0)
    args = p.parse_args(argv)
    key = os.environ.get("ROLLFORGE_GATEWAY_KEY") or os.environ.get("OPENAI_API_KEY")
    if not key:
        print("agent_client: set ROLLFORGE_GATEWAY_KEY (or OPENAI_API_KEY)", file=sys.stderr)
        return 2
    client = openai.OpenAI(base_url=args.base_url, api_key=key, max_retries=0)
    try:
        for _ in range(args.episodes):
            print(json.dumps(play(client, args)), flush=True)
    except openai.APIStatusError as exc:  # the gateway's named error, e.g. invalid_api_key
        print(f"agent_client: {exc.status_code} {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
