"""The in-sandbox harness for HumanEval-style tasks, shipped into the sandbox as `harness.py`.

It receives a batch of samples (`batch.json`, deleted once read): per sample, the solution's
source, its entry point and the *arguments* of the candidate calls the grader planned. The asserts,
the expected values and the comparisons stay in the grader's process.

Each sample runs in its own forked process (`_spawn` and `_sample`, rewards/guard.py): it gets a
pipe for its records and one for its prints and no other file descriptor, installs the guard, runs
the entry point once per planned call under a per-call alarm, and writes each return value in the
typed wire format of `rewards/wire.py` (exact builtin types only) through the guard, which keys
it. This harness's parent process never runs candidate code: it kills a sample's process group at
the sample's wall-clock limit and relays, per sample, the record lines the guard wrote (anything
else on the pipe becomes a `forged_record` flag; a sample that ended its own process before the
harness was done, an `early_exit` flag), up to 8 KiB of prints, and how the sample ended. The
grader parses what it relays, trusting nothing. A batch of one is what `score()` uses;
`rollforge eval` batches samples so that the sandbox and interpreter start-up is paid once per
batch.

Parent output, one JSON object per line: {"s", "rec": <raw line>}, {"s", "prints"},
{"s", "end": ok|failed|timeout|memory_exceeded|output_truncated, "code", "t"}, then {"batch_done"}.
Child records: {"flag"}, {"load_error"}, {"loaded"}, {"i", "value"|"error"}, {"done"}.
"""
from pathlib import Path

from rewards import wire
from rewards.guard import GUARD_SOURCE
from sandbox.fork_server import trust_script

_WIRE_SOURCE = Path(wire.__file__).read_text()

_MAIN_SOURCE = r'''
import gc as _gc, json as _jsonlib

_dumps, _loads = _jsonlib.dumps, _jsonlib.loads


def _run_one(k, item, per_test, limit_s, out):
    lines = []

    def child(key_fd, rec_fd):
        # a call on the wire is (args, kwargs); the guard is strict: stdlib-only tasks
        _sample(key_fd, rec_fd, item["source"], item["entry"], item["calls"], per_test,
                decode, encode, True)

    t0 = _time.monotonic()
    end, code, prints, done, _ = _spawn(child, limit_s, lambda line: lines.append(
        {"s": k, "rec": line}), capture_prints=True)
    if not done and code >= 0:
        lines.append({"s": k, "rec": '{"flag": "early_exit"}'})  # it ended its own process
    lines.append({"s": k, "prints": prints})
    lines.append({"s": k, "end": end, "code": code, "t": _time.monotonic() - t0})
    out(lines)  # one write a sample: the grader wakes once for it


def main():
    per_test, limit_s = float(_sys.argv[1]), float(_sys.argv[2])
    with open("batch.json") as fh:
        batch = _loads(fh.read())
    _os.remove("batch.json")
    if len(batch) > 1:  # what HumanEval prompts and solutions import: once, for every fork
        import typing, re, math, collections, itertools, functools, string, heapq
        # The compiler's first use sets up state a forked child would otherwise build for
        # itself, sample after sample (about 2 ms each): use it once here, on our own text.
        exec(compile("def _warm(x):\n    return [x for _ in ()]\n", "warm.py", "exec"), {})

    def out(recs):
        data = memoryview("".join(_dumps(r) + "\n" for r in recs).encode())
        while data:
            data = data[_os.write(1, data):]

    # Every object so far is the parent's: a sample's garbage collections leave them alone
    # (walking them would copy their pages into the child, sample after sample).
    _gc.freeze()
    for k, item in enumerate(batch):
        _run_one(k, item, per_test, limit_s, out)
    out([{"batch_done": True}])


main()
'''

HARNESS_SOURCE = _WIRE_SOURCE + "\n" + GUARD_SOURCE + "\n" + _MAIN_SOURCE
trust_script(HARNESS_SOURCE)  # zygotes may keep it compiled
