"""The in-sandbox harness of the `verifiers` kind, run by the kind's own venv's interpreter
(envs/verifiers/venv.py) as `harness.py list|score SECONDS`, shipped with `job.json` (deleted
once read).

`list`: loads the environment (`verifiers.load_environment(env_id, **env_args)`) and writes
one JSON line per row of its training and evaluation datasets ({"split", "index", "prompt",
"answer", "reference", "info"}: the reference is the answer as the environment's parser
formats it, where it can), then {"rows_done"}. Loading is the environment's own code: it runs here, in
the sandbox, never in the worker.

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

Parent output, one JSON object a line: {"s", "setup_error"} | {"s", "funcs": [[name, weight]]},
{"s", "rec": <raw line>}..., {"s", "prints"}, {"s", "end", "code", "t"}; finally
{"batch_done"}; or {"load_error"} when the environment did not load.
Child records: {"flag"}, {"compiled"}, {"reward": name, "value"} | {"reward", "error"}, {"done"}.
"""
from envs.batch_harness import CAPTURE_SOURCE
from rewards.guard import GUARD_SOURCE
from sandbox.fork_server import trust_script

_MAIN_SOURCE = r'''
import hashlib as _hashlib, json as _jsonlib, logging as _logging, math as _math

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


def _score(key_fd, rec_fd, rubric, state, funcs, limit_s):
    """One answer, in its own process; every record is raised from this frame."""
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
            state = _state(row, item["answer"])
        except Exception as exc:
            _out([{"s": k, "setup_error": (type(exc).__name__ + ": " + str(exc))[:500]}])
            continue
        lines = [{"s": k, "funcs": [[n, w] for (n, _), w in zip(funcs, weights)]}]

        def child(key_fd, rec_fd):
            _score(key_fd, rec_fd, rubric, state, funcs, limit_s)

        t0 = _time.monotonic()
        end, code, prints, done, _ = _spawn(child, limit_s * len(funcs) + 2.0,
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
