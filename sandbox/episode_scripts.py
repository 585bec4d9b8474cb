"""The helper programs an episode runs inside the sandbox (sandbox/episode.py): the visible-
example checker behind `<run_tests/>` and the runner behind `<run>`."""

# Runs the task's visible examples in the sandbox: loads solution.py, calls the entry point,
# prints one line per example. The examples are visible to the agent, so their expected values
# may sit in the sandbox; the final grade never uses this.
CHECK_SOURCE = r'''
import json, math, sys, traceback
entry = sys.argv[1]
with open("_episode_examples.json") as fh:
    examples = json.load(fh)
def same(e, a):
    if isinstance(e, bool) or isinstance(a, bool):
        return type(e) is type(a) and e == a
    if isinstance(e, float) or isinstance(a, float):
        return isinstance(a, (int, float)) and isinstance(e, (int, float)) and math.isclose(e, a, rel_tol=1e-6, abs_tol=1e-9)
    if isinstance(e, list):
        return isinstance(a, (list, tuple)) and len(a) == len(e) and all(same(x, y) for x, y in zip(e, a))
    if isinstance(e, dict):
        return isinstance(a, dict) and a.keys() == e.keys() and all(same(e[k], a[k]) for k in e)
    return type(e) is type(a) and e == a
ns = {"__name__": "solution"}
try:
    with open("solution.py") as fh:
        exec(compile(fh.read(), "solution.py", "exec"), ns)
    fn = ns[entry]
except BaseException:
    print("LOAD ERROR: solution.py could not be loaded or does not define %s" % entry)
    traceback.print_exc(limit=3, file=sys.stdout)
    sys.exit(1)
passed = 0
for i, ex in enumerate(examples):
    call = "%s(%s)" % (entry, ", ".join(repr(a) for a in ex["args"]))
    try:
        got = fn(*ex["args"])
    except BaseException as exc:
        print("FAIL %s raised %s: %s" % (call, type(exc).__name__, exc))
        traceback.print_exc(limit=-2, file=sys.stdout)
        continue
    if same(ex["expected"], got):
        passed += 1
        print("PASS %s == %r" % (call, got))
    else:
        print("FAIL %s returned %r, expected %r" % (call, got, ex["expected"]))
print("%d/%d visible examples passed" % (passed, len(examples)))
sys.exit(0 if passed == len(examples) else 1)
'''

# Runs one workspace file as __main__, then packs the workspace's text files into a manifest so
# that files the program made, changed or removed come back (collect needs names in advance).
RUN_SOURCE = r'''
import json, os, runpy, sys
target, args = sys.argv[1], sys.argv[2:]
sys.argv = [target] + args
sys.path.insert(0, os.getcwd())
code = 0
try:
    runpy.run_path(target, run_name="__main__")
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    if not isinstance(exc.code, (int, type(None))):
        print(exc.code, file=sys.stderr)
except BaseException:
    import traceback
    traceback.print_exc()
    code = 1
finally:
    files = {}
    for root, dirs, names in os.walk("."):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        for n in names:
            rel = os.path.normpath(os.path.join(root, n))
            if rel.startswith("_episode_") or os.path.islink(rel) or len(files) >= 64:
                continue
            try:
                with open(rel, encoding="utf-8") as fh:
                    files[rel] = fh.read(%(cap)d + 1)
            except (OSError, UnicodeDecodeError):
                pass
    with open("_episode_files.json", "w") as fh:
        json.dump(files, fh)
sys.exit(code)
'''
