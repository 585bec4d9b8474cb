"""The in-sandbox harness of the `verifiers` kind, run by the kind's own venv's interpreter
(envs/verifiers/venv.py) as `harness.py list|score|turn SECONDS`, shipped with `job.json`
(deleted once read).

`list`: loads the environment (`verifiers.load_environment(env_id, **env_args)`) and writes
first {"env": {"class", "multi_turn", "max_turns", "tools"}} (its tools as OpenAI function
schemas), then one JSON line per row of its training and evaluation datasets ({"split",
"index", "prompt", "answer", "reference", "info"}: the reference is the answer as the
environment's parser formats it, where it can), then {"rows_done"}. Loading is the
environment's own code: it runs here, in the sandbox, never in the worker.

`score`: loads the environment once, rebuilds each answer's row (the digest of its prompt must
be the task's), and scores each answer in a forked process of its own (`_spawn`,
rewards/guard.py): the guard is installed (not strict: verifiers has loaded ctypes and socket),
the rubric's reward functions run one by one through the rubric's own call
(`Rubric._call_individual_reward_func`: the arguments each asks for, its exceptions scored 0),
on a completion of one assistant message, and the harness frame writes each function's value
as a keyed record. The answer is data handed to the rubric; what the rubric compiles while it
scores (a math rubric's sympy `parse_expr`) is captured by an audit hook added before the guard
and sent as `{"compiled"}` records, and every module's namespace is compared with a copy taken
before the call (`rubric_tampering`).

`turn`: one step of a multi-turn episode (`MultiTurnEnv`, its `env_response` and stop
conditions), by replay: the environment's own `rollout` runs from the row again with a client
that answers its model calls with the episode's replies so far, in order (`_replay_client`).
A reply's tool calls (where the environment offers tools: Hermes/Qwen `<tool_call>` JSON, or a
plain JSON object for the whole reply) are the response's `tool_calls`, malformed ones
included (the environment answers them with its own error text); their outcomes are a
`{"calls"}` record. When the rollout asks for one more reply, it is stopped there and the
messages it would send after the last reply are the `{"next": [...]}` record: the next
observation. When it ends by itself (its stop conditions, `final_env_response`, its own
`max_turns`), or the item is `final` and it asks for more (the policy's turns or context are
spent: a `vf.Error`, which verifiers records as the rollout's error and ends it), the finished
state is scored as `score` scores one. The environment must answer the same replies the same way (replay is how
its state is rebuilt in a fresh sandbox each step). The replayed rollout runs in the scoring
child, under the guard (its `env_response` reads the policy's replies), never in this process;
a rollout on empty replies runs here first (`_warm`).

Parent output, one JSON object a line: {"s", "setup_error"} | {"s", "funcs": [[name, weight]]},
{"s", "rec": <raw line>}..., {"s", "prints"}, {"s", "end", "code", "t"}; finally
{"batch_done"}; or {"load_error"} when the environment did not load.
Child records: {"flag"}, {"compiled"}, {"calls"}, {"next"} | {"rollout_error"},
{"reward": name, "value"} | {"reward", "error"}, {"done"}.
"""
from envs.batch_harness import CAPTURE_SOURCE
from rewards.guard import GUARD_SOURCE
from sandbox.fork_server import trust_script

_MAIN_SOURCE = r'''
import hashlib as _hashlib, json as _jsonlib, logging as _logging, math as _math, re as _re

_dumps, _loads = _jsonlib.dumps, _jsonlib.loads
def _out(recs):
    data = memoryview("".join(_dumps(r, default=str) + "\n" for r in recs).encode())
    while data:
        data = data[_os.write(1, data):]


def _load(job):
    _logging.disable(_logging.CRITICAL)  # verifiers logs to stdout/stderr; the records are ours
    import verifiers as vf
    return vf.load_environment(job["env_id"], **job["env_args"])


def _rows(env):
    """(split, dataset) pairs: the training dataset, and the evaluation one where it has one
    (verifiers' get_eval_dataset falls back to the training one; that is no second split)."""
    out = [("train", env.get_dataset())]
    if env.build_eval_dataset() is not None:
        out.append(("eval", env.get_eval_dataset()))
    return out


def _reference(env, answer):
    """The row's answer as a completion the environment's parser reads back (XMLParser's own
    `format`), else the answer itself."""
    parser = getattr(env, "parser", None)
    field, fmt = getattr(parser, "answer_field", None), getattr(parser, "format", None)
    if isinstance(field, str) and callable(fmt) and isinstance(answer, str):
        try:
            return str(fmt(**{field: answer}))
        except Exception:
            pass
    return answer


def _plain(v):
    return _loads(_dumps(v, default=str))


def _prompt_sha(prompt):
    return _hashlib.sha256(_dumps(_plain(prompt), sort_keys=True).encode()).hexdigest()


def _drive(coro):
    """Run a coroutine that never waits on I/O to its end, without an event loop (a reward
    function that truly awaits, a judge model over the network, has no network here)."""
    try:
        while True:
            coro.send(None)
            raise RuntimeError("the reward function awaited I/O")
    except StopIteration as stop:
        return stop.value


def _score(key_fd, rec_fd, rubric, make_state, funcs, limit_s, rollout_s):
    """One answer, in its own process; every record is raised from this frame. `make_state()`
    gives {"state": what the rubric scores}, made here under the guard (a multi-turn rollout
    replayed on the policy's replies: the environment's code reads them), or {"next":
    [messages]} when the rollout asks for another reply, which is then the one record (after
    the reply's {"calls"}, where it made some)."""
    audit, dumps = _sys.audit, _json_writer()
    setitimer, itimer = _signal.setitimer, _signal.ITIMER_REAL
    type_, float_, int_, isfinite, isinstance_ = type, float, int, _math.isfinite, isinstance
    to_float, name_of = float.__float__, type.__dict__["__name__"].__get__
    REC, FLAG, END, Timeout, exits = _REC, _FLAG, _END, _Timeout, (SystemExit, KeyboardInterrupt)
    drive, call = _drive, rubric._call_individual_reward_func
    module_type, missing = type(_sys), object()
    before = [(m.__dict__, m.__dict__.copy()) for m in list(_sys.modules.values())
              if type_(m) is module_type]
    compiled = []
    results = []
    _signal.signal(_signal.SIGALRM, _alarm)
    _install_guard(rec_fd, _os.read(key_fd, 64), {"__name__": "answer"}, False, ())
    _os.close(key_fd)
    _capture[0] = compiled
    state = None
    try:
        setitimer(itimer, rollout_s)
        try:
            state = make_state()
        finally:
            setitimer(itimer, 0)
    except Timeout:
        audit(REC, dumps({"rollout_error": "Timeout"}))
    except BaseException as exc:
        audit(REC, dumps({"rollout_error": name_of(type_(exc))}))
        if isinstance_(exc, exits):
            audit(FLAG, "exit_called")
    if state is not None and state.get("calls"):
        audit(REC, dumps({"calls": state["calls"]}))
    if state is not None and "next" in state:
        audit(REC, dumps({"next": state["next"]}))
        audit(END)
        return
    if state is None:
        funcs = ()
    else:
        state = state["state"]
    for name, func in funcs:
        value = error = None
        try:
            setitimer(itimer, limit_s)
            try:
                value = drive(call(func=func, state=state))
            finally:
                setitimer(itimer, 0)
        except Timeout:
            error = "Timeout"
        except BaseException as exc:
            error = name_of(type_(exc))
            if isinstance_(exc, exits):
                audit(FLAG, "exit_called")
        if error is None:
            if isinstance_(value, float_) or isinstance_(value, int_):
                value = to_float(float_(value))
            else:
                value, error = None, "NonPlainReward"
        results.append((name, value, error))
    _capture[0] = None
    for src in compiled:
        audit(REC, dumps({"compiled": src}))
    for live, copy in before:
        get = live.get
        if any(get(k, missing) is not v for k, v in copy.items()):
            audit(FLAG, "rubric_tampering")
            break
    for name, value, error in results:
        if error is None and isfinite(value):
            audit(REC, dumps({"reward": name, "value": value}))
        else:
            audit(REC, dumps({"reward": name, "error": error or "NotFinite"}))
    audit(END)


def _state(row, answer):
    """What the rubric reads of a rollout of one turn: the row's prompt, answer, info and task,
    and the completion, one assistant message."""
    completion = [{"role": "assistant", "content": answer}]
    state = {"prompt": row["prompt"], "completion": completion, "answer": row.get("answer", ""),
             "info": row.get("info") or {}, "input": dict(row), "responses": [],
             "trajectory": [], "turn": 1, "timing": {}}
    if "task" in row:
        state["task"] = row["task"]
    return state


def _tool_schema(tool):
    """A tool of the environment as OpenAI's API and `apply_chat_template(tools=...)` take it."""
    t = _message(tool)
    return {"type": "function", "function": {"name": str(t.get("name", "")),
                                             "description": str(t.get("description", "")),
                                             "parameters": t.get("parameters") or {}}}


def vf_multi_turn():
    import verifiers as vf
    return vf.MultiTurnEnv


class _NextTurn(Exception):
    """The rollout asked for a reply past the episode's: stop it there."""


def _message(m):
    """A message as plain JSON: verifiers' pydantic messages dumped, dicts kept."""
    if hasattr(m, "model_dump"):
        m = m.model_dump(exclude_none=True)
    return _plain(m)


_CALL_BLOCK = _re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", _re.S)


def _calls_of(text, names):
    """The tool calls of a reply, in the Hermes/Qwen format (JSON in <tool_call> tags) or as a
    plain JSON object (or list of them) for the whole reply: [(name, arguments JSON)] for the
    environment (a malformed call goes too, named "" or by what it said, so that the
    environment answers it as it answers a bad call), and each call's outcome for the row."""
    bodies = [m.group(1) for m in _CALL_BLOCK.finditer(text)]
    if not bodies and text.strip()[:1] in ("{", "["):
        try:
            whole = _loads(text)
        except ValueError:
            whole = None
        if isinstance(whole, (dict, list)):
            bodies = [_dumps(c) for c in (whole if isinstance(whole, list) else [whole])]
    calls, outcomes = [], []
    for body in bodies:
        name, args, why = "", body.strip(), ""
        try:
            obj = _loads(body)
        except ValueError as exc:
            why = "not JSON: " + str(exc)[:120]
        else:
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
                why = 'expected {"name": ..., "arguments": {...}}'
            else:
                name, a = obj["name"], obj.get("arguments", {})
                args = a if isinstance(a, str) else _dumps(a)
                if not isinstance(a, (dict, str)):
                    why = "arguments must be a JSON object"
                elif name not in names:
                    why = "no tool named " + repr(name)[:80]
        calls.append((name, args))
        outcomes.append({"name": name, "status": "malformed" if why else "ran",
                         "detail": why})
    return calls, outcomes


def _replay_client(replies, final):
    import time as time_
    import verifiers as vf
    from verifiers.clients import Client
    from verifiers.types import Response, ResponseMessage, ToolCall

    class Replay(Client):
        """Answers the rollout's model calls with the episode's replies, in order; a reply's
        tool calls (where the environment offers tools) as the response's `tool_calls`."""

        def __init__(self):
            super().__init__(None)
            self.n, self.asked, self.calls = 0, None, []

        def setup_client(self, config):
            return None

        async def to_native_tool(self, tool):
            return tool

        async def to_native_prompt(self, messages):
            return messages, {}

        async def get_native_response(self, *args, **kwargs):
            raise NotImplementedError

        async def raise_from_native_response(self, response):
            return None

        async def from_native_response(self, response):
            return response

        async def close(self):
            return None

        async def get_response(self, prompt, model, sampling_args, tools=None, **kwargs):
            if self.n >= len(replies):
                if final:  # the policy has no more turns: the rollout ends with this error
                    raise vf.Error("the policy's turns or context were spent")
                self.asked = list(prompt)
                raise _NextTurn()
            text, self.n = replies[self.n], self.n + 1
            calls, outcomes = _calls_of(text, {t.name for t in tools or []}) if tools \
                else ([], [])
            self.calls.append(outcomes)
            tool_calls = [ToolCall(id=f"call-{self.n}-{i}", name=name, arguments=args)
                          for i, (name, args) in enumerate(calls)] or None
            return Response(id=f"replay-{self.n}", created=int(time_.time()), model=model,
                            message=ResponseMessage(content=text, tool_calls=tool_calls,
                                                    finish_reason="tool_calls" if tool_calls
                                                    else "stop", is_truncated=False))

    return Replay()


def _replayed(env, row, replies, final):
    """The rollout of `row` replayed on `replies`: {"state": its finished state} or {"next":
    [the messages after the last reply]} when it asks for another; with "calls", the outcomes
    of the last reply's tool calls."""
    import asyncio
    client = _replay_client(list(replies), bool(final))
    data = dict(row)
    data.setdefault("example_id", 0)
    try:
        state = asyncio.run(env.rollout(data, client, "policy", {}))
    except _NextTurn:
        asked = [_message(m) for m in client.asked]
        last = max((i for i, m in enumerate(asked) if m.get("role") == "assistant"), default=-1)
        return {"next": asked[last + 1:] if last >= 0 else asked,
                "calls": client.calls[-1] if client.calls else []}
    return {"state": state, "calls": client.calls[-1] if client.calls else []}


def _warm(env, row, turns):
    """The rollout once on empty replies, here, before the scoring child is forked: what the
    environment's code and asyncio set up on first use (asyncio's event loop policy, a
    module's cache) is then set up in the copy the child compares its modules with, and is not
    taken for the policy's replies tampering with the rubric. Nothing of the policy runs."""
    try:
        _replayed(env, row, [""] * turns, True)
    except Exception:
        pass


def main():
    mode, limit_s = _sys.argv[1], float(_sys.argv[2])
    with open("job.json") as fh:
        job = _loads(fh.read())
    _os.remove("job.json")
    _sys.addaudithook(_compile_hook)
    try:
        env = _load(job)
        splits = dict(_rows(env))
    except BaseException as exc:
        _out([{"load_error": (type(exc).__name__ + ": " + str(exc))[:1000]}])
        return
    if mode == "list":
        multi = isinstance(env, vf_multi_turn()) and getattr(env, "max_turns", 1) != 1
        _out([{"env": {"class": type(env).__name__, "multi_turn": bool(multi),
                       "max_turns": int(getattr(env, "max_turns", 1) or -1),
                       "tools": [_tool_schema(t) for t in getattr(env, "tool_defs", None)
                                 or []]}}])
        for split, ds in splits.items():
            for i in range(len(ds)):
                row = ds[i]
                _out([{"split": split, "index": i, "prompt": _plain(row["prompt"]),
                       "answer": _plain(row.get("answer", "")),
                       "reference": _plain(_reference(env, row.get("answer", ""))),
                       "info": _plain(row.get("info") or {})}])
        _out([{"rows_done": True}])
        return
    rubric = env.rubric
    funcs = [(f.__name__, f) for f in rubric._get_reward_funcs()]
    weights = list(rubric._get_reward_weights())
    for k, item in enumerate(job["items"]):
        try:
            ds = splits[item["split"]]
            row = ds[item["index"]]
            if _prompt_sha(row["prompt"]) != item["prompt_sha"]:
                raise ValueError("the row rebuilt here has another prompt than the task (another "
                                 "version of the environment, or other env_args?)")
            if any(rubric._is_group_func(f) for _, f in funcs):
                raise ValueError("the rubric has group reward functions, which score a group "
                                 "of rollouts together: not supported by this kind yet")
            if mode == "turn":
                replies, final = [str(r) for r in item["replies"]], bool(item["final"])
                _warm(env, row, len(replies))
                make_state = (lambda row=row, replies=replies, final=final:
                              _replayed(env, row, replies, final))
                rollout_s = limit_s * (1 + len(replies))
            else:
                make_state = lambda state=_state(row, item["answer"]): {"state": state}
                rollout_s = limit_s
        except Exception as exc:
            _out([{"s": k, "setup_error": (type(exc).__name__ + ": " + str(exc))[:500]}])
            continue
        lines = [{"s": k, "funcs": [[n, w] for (n, _), w in zip(funcs, weights)]}]

        def child(key_fd, rec_fd):
            _score(key_fd, rec_fd, rubric, make_state, funcs, limit_s, rollout_s)

        t0 = _time.monotonic()
        end, code, prints, done, _ = _spawn(child, limit_s * len(funcs) + rollout_s + 2.0,
                                            lambda line: lines.append({"s": k, "rec": line}),
                                            capture_prints=True)
        if not done and code >= 0:
            lines.append({"s": k, "rec": '{"flag": "early_exit"}'})
        lines.append({"s": k, "prints": prints})
        lines.append({"s": k, "end": end, "code": code, "t": _time.monotonic() - t0})
        _out(lines)
    _out([{"batch_done": True}])


main()
'''

HARNESS_SOURCE = GUARD_SOURCE + "\n" + CAPTURE_SOURCE + "\n" + _MAIN_SOURCE
trust_script(HARNESS_SOURCE)
