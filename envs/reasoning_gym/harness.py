"""The in-sandbox harness of the `reasoning_gym` kind, shipped into the sandbox as `harness.py`.

It receives a batch (`job.json`, deleted once read): per answer, the dataset's recipe (name,
options, level, seed, size: envs/reasoning_gym/recipe.py, shipped in), the entry's index, the
digest of the question the task showed, and the answer. The parent
process imports reasoning_gym, rebuilds each entry from the generator (the expected answer is
never sent in), checks that its question is the task's, and scores the dataset's own answer once
(lazy imports and caches are made here, and the code the scorer compiles from that answer is
the measure of what an answer's code may contain). It never runs the candidate's answer.

Each answer is then scored in a forked process of its own (`_spawn`, rewards/guard.py): the
guard is installed (not strict: reasoning_gym has already loaded ctypes and socket, which the
child inherits; the ctypes memory events stay denied), `score_answer(answer, entry)` runs under
an alarm, and the harness frame writes the score as a keyed record. Anything the scorer
compiles while it runs (sympy's `parse_expr`, `eval`) is captured by an audit hook added before
the guard and sent as `{"compiled"}` records; after the call, every module loaded before it is
compared with a copy of its namespace taken before it, and a change is `scorer_tampering`.

Parent output, one JSON object a line: {"s", "setup_error"} | {"s", "ref_compiled": [...]},
then {"s", "rec": <raw line>}..., {"s", "prints"}, {"s", "end", "code", "t"}; finally
{"batch_done"}. Child records: {"flag"}, {"compiled"}, {"score"} | {"error"}, {"done"}.
"""
from pathlib import Path

from envs.batch_harness import CAPTURE_SOURCE
from envs.reasoning_gym import recipe
from rewards.guard import GUARD_SOURCE
from sandbox.fork_server import trust_script

_RECIPE_SOURCE = Path(recipe.__file__).read_text()

_MAIN_SOURCE = r'''
import hashlib as _hashlib, json as _jsonlib, math as _math

_dumps, _loads = _jsonlib.dumps, _jsonlib.loads


def _score(key_fd, rec_fd, scorer, entry, answer, limit_s):
    """One answer, in its own process. Every record is raised from this frame (the guard honours
    no other); what it needs after the scorer ran is bound first."""
    audit, dumps = _sys.audit, _json_writer()
    setitimer, itimer = _signal.setitimer, _signal.ITIMER_REAL
    type_, float_, int_, isfinite, isinstance_ = type, float, int, _math.isfinite, isinstance
    to_float, to_int, name_of = float.__float__, int.__int__, type.__dict__["__name__"].__get__
    REC, FLAG, END, Timeout, exits = _REC, _FLAG, _END, _Timeout, (SystemExit, KeyboardInterrupt)
    module_type, missing = type(_sys), object()
    # namespaces of every loaded module, copied (about 20 ms for reasoning_gym's 1200 modules)
    before = [(m.__dict__, m.__dict__.copy()) for m in list(_sys.modules.values())
              if type_(m) is module_type]
    compiled = []
    _signal.signal(_signal.SIGALRM, _alarm)
    _install_guard(rec_fd, _os.read(key_fd, 64), {"__name__": "answer"}, False, ())
    _os.close(key_fd)
    value = error = None
    _capture[0] = compiled
    try:
        setitimer(itimer, limit_s)
        try:
            value = scorer(answer, entry)
        finally:
            setitimer(itimer, 0)
    except Timeout:
        error = "Timeout"
    except BaseException as exc:
        error = name_of(type_(exc))
        if isinstance_(exc, exits):
            audit(FLAG, "exit_called")
    _capture[0] = None
    for src in compiled:
        audit(REC, dumps({"compiled": src}))
    for live, copy in before:
        get = live.get
        if any(get(k, missing) is not v for k, v in copy.items()):
            audit(FLAG, "scorer_tampering")
            break
    if error is None:
        # the number itself, read with float's and int's own methods (a subclass cannot lie)
        if isinstance_(value, float_):
            value = to_float(value)
        elif isinstance_(value, int_):
            value = float_(to_int(value))
        else:
            value, error = None, "NonPlainScore"
    if error is None and isfinite(value) and 0.0 <= value <= 1.0:
        audit(REC, dumps({"score": value}))
    else:  # a scorer's own bug (a score outside [0, 1]) is an error, never a record it forged
        audit(REC, dumps({"error": error or "ScoreOutOfRange"}))
    audit(END)


def _setup(item, datasets):
    """(scorer, entry, compiled sources of the reference) of one item; raises on a bad item."""
    key = _dumps(item["recipe"], sort_keys=True)
    ds = datasets.get(key)
    if ds is None:
        ds = datasets[key] = build(*item["recipe"])
    entry = ds[item["index"]]
    digest = _hashlib.sha256(str(entry["question"]).encode()).hexdigest()
    if digest != item["question_sha"]:
        raise ValueError("the entry rebuilt here asks another question than the task (another "
                         "reasoning-gym version generated it?)")
    ref_compiled = []
    _capture[0] = ref_compiled
    try:
        ds.score_answer(str(entry["answer"]), entry)
    except Exception:
        pass  # the scorer's own trouble with its own answer shows in the task check
    finally:
        _capture[0] = None
    return ds.score_answer, entry, ref_compiled


def main():
    limit_s = float(_sys.argv[1])
    with open("job.json") as fh:
        batch = _loads(fh.read())
    _os.remove("job.json")
    _sys.addaudithook(_compile_hook)
    datasets = {}

    def out(recs):
        data = memoryview("".join(_dumps(r) + "\n" for r in recs).encode())
        while data:
            data = data[_os.write(1, data):]

    for k, item in enumerate(batch):
        try:
            scorer, entry, ref_compiled = _setup(item, datasets)
        except Exception as exc:
            out([{"s": k, "setup_error": (type(exc).__name__ + ": " + str(exc))[:500]}])
            continue
        lines = [{"s": k, "ref_compiled": ref_compiled}]

        def child(key_fd, rec_fd):
            _score(key_fd, rec_fd, scorer, entry, item["answer"], limit_s)

        t0 = _time.monotonic()
        end, code, prints, done, _ = _spawn(child, limit_s + 2.0, lambda line: lines.append(
            {"s": k, "rec": line}), capture_prints=True)
        if not done and code >= 0:
            lines.append({"s": k, "rec": '{"flag": "early_exit"}'})  # it ended its own process
        lines.append({"s": k, "prints": prints})
        lines.append({"s": k, "end": end, "code": code, "t": _time.monotonic() - t0})
        out(lines)
    out([{"batch_done": True}])


main()
'''

HARNESS_SOURCE = (_RECIPE_SOURCE + "\n" + GUARD_SOURCE + "\n" + CAPTURE_SOURCE + "\n"
                  + _MAIN_SOURCE)
trust_script(HARNESS_SOURCE)  # zygotes may keep it compiled
