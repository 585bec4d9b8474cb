"""The in-sandbox harness for input/output tests, shipped into the sandbox as `harness.py`.

Threat model: the candidate's code can change anything in the process it runs in. Nothing it
changes matters, because the sandbox receives only the test *inputs*; the expected outputs stay
with the grader, which compares the plain JSON values that come back. The sample runs in a forked
process of its own (`_spawn`, rewards/guard.py): only records its harness loop wrote through the
guard reach stdout, so a candidate that writes records of its own, exits early, loops, crashes or
returns objects that are not plain data simply produces no matching value for those tests, and
is flagged for it. What it tries on files, processes, frames, the grader's modules, the builtins
and this harness is flagged as well as denied.

`python harness.py ENTRY PER_TEST_S`; ENTRY `frames:NAME` (the `dataframe` kind): inputs that are
dicts of columns become `pandas.DataFrame`s, and the result comes back as plain data: numpy
scalars as Python numbers, a Series with a default index as a list and any other Series as a dict
keyed by its labels (as strings), a DataFrame as a list of row dicts, an Index or array as a list.
Only pandas' and numpy's own types are converted (a subclass of one, which could lie, is refused
like any other object that is not plain data), by methods taken before the candidate ran; a
list, tuple or dict subclass is read as the data it holds (a Counter, a namedtuple) unless it
overrides a method it could lie through.
"""
from rewards.guard import GUARD_SOURCE
from sandbox.fork_server import trust_script

# What a value is allowed to come back as, and the `frames:` conversions (also run in-process by
# envs/dataframe/grading.py's `adapter_source`): plain functions, no state.
PLAIN_SOURCE = r'''
_PLAIN = (int, float, str, bool, type(None))


class NonPlainResult(TypeError):
    pass


def _plain(v, depth=0):
    """Exact plain JSON types only: a subclass of a builtin (which could lie) is refused."""
    t = type(v)
    if depth > 50:
        raise NonPlainResult("result nested too deeply")
    if t in _PLAIN:
        return v
    if t in (list, tuple):
        return [_plain(x, depth + 1) for x in v]
    if t is dict:
        out = {}
        for k, x in v.items():
            if type(k) is not str:
                raise NonPlainResult("dict key of type %s" % type(k).__name__)
            out[k] = _plain(x, depth + 1)
        return out
    raise NonPlainResult("result of non-plain type %s" % t.__name__)


def _subclasses(cls, package):
    """`cls` and its subclasses defined so far by `package` (before any candidate code)."""
    out, todo = set(), [cls]
    while todo:
        c = todo.pop()
        if c.__module__.split(".")[0] == package and c not in out:
            out.add(c)
            todo.extend(c.__subclasses__())
    return frozenset(out)


# Methods through which a container could lie about the values it holds.
_LYING_METHODS = ("__eq__", "__ne__", "__hash__", "__bool__", "__len__", "__iter__", "__getitem__",
                  "__contains__", "items", "keys", "values")


def _frames(pd, np):
    """What `frames:` mode calls with and returns: (call_of, wire_of, watched classes)."""
    import collections

    DataFrame, Series, RangeIndex = pd.DataFrame, pd.Series, pd.RangeIndex
    to_dict, series_tolist, series_items = DataFrame.to_dict, Series.tolist, Series.items
    arrays = _subclasses(pd.Index, "pandas") | _subclasses(np.ndarray, "numpy")
    scalars = frozenset(np.sctypeDict.values())
    stdlib = frozenset({collections.Counter, collections.OrderedDict, collections.defaultdict})
    mro_of, dict_items = type.__dict__["__mro__"].__get__, dict.items

    def container(t):
        """The builtin (list, tuple, dict) whose data a value of type `t` is, read with the
        builtin's own methods: the builtin itself, a stdlib subclass (Counter, OrderedDict,
        defaultdict) or one that overrides no method a value could lie through (a namedtuple);
        None for anything else (which `_plain` then refuses)."""
        mro = mro_of(t)
        for base in (list, tuple, dict):
            if base in mro:
                own = mro[:mro.index(base)]
                if all(c in stdlib or not any(m in vars(c) for m in _LYING_METHODS)
                       for c in own):
                    return base
        return None

    def plain(v, depth=0):
        t = type(v)
        if depth > 50:
            raise NonPlainResult("result nested too deeply")
        if t is DataFrame:
            return [plain(r, depth + 1) for r in to_dict(v, "records")]
        if t is Series:
            idx = v.index
            if type(idx) is RangeIndex and idx.start == 0 and idx.step == 1:
                return [plain(x, depth + 1) for x in series_tolist(v)]
            return {str(k): plain(x, depth + 1) for k, x in series_items(v)}
        if t in arrays:
            return [plain(x, depth + 1) for x in v.tolist()]
        if t in scalars:
            return v.item()
        base = container(t)
        if base is dict:
            return {(str(k) if type(k) in scalars else k): plain(x, depth + 1)
                    for k, x in dict_items(v)}
        if base is not None:
            return [plain(x, depth + 1) for x in base.__iter__(v)]
        return v  # _plain refuses it if it is not plain data

    def call_of(args):
        return [DataFrame(a) if type(a) is dict else a for a in args], {}

    return call_of, lambda v: _plain(plain(v)), (DataFrame, Series, pd.Index, RangeIndex)
'''

_MAIN_SOURCE = r'''
import json as _jsonlib


def _out(line):
    data = (line + "\n").encode()
    while data:
        data = data[_os.write(1, data):]


def main():
    entry, per_test = _sys.argv[1], float(_sys.argv[2])
    with open("inputs.json") as fh:
        inputs = _jsonlib.loads(fh.read())
    _os.remove("inputs.json")
    with open("solution.py") as fh:
        source = fh.read()
    call_of, wire_of, watched = (lambda args: (args, {})), _plain, ()
    if entry.startswith("frames:"):
        entry = entry[len("frames:"):]
        try:
            import pandas, numpy
        except ImportError as exc:  # the grader reports this as the sandbox's failure
            _out(_jsonlib.dumps({"load_error": "%s: %s" % (type(exc).__name__, exc)}))
            _out('{"done": true}')
            return
        call_of, wire_of, watched = _frames(pandas, numpy)

    def child(key_fd, rec_fd):  # numpy/pandas may be used: the guard is not strict
        _sample(key_fd, rec_fd, source, entry, inputs, per_test, call_of, wire_of, False,
                watched)

    _, code, _, done, _ = _spawn(child, None, _out, capture_prints=False)
    if not done and code >= 0:
        _out('{"flag": "early_exit"}')  # it ended its process before the harness was done
    _os._exit(0 if code == 0 else 1)


main()
'''

HARNESS_SOURCE = GUARD_SOURCE + "\n" + PLAIN_SOURCE + "\n" + _MAIN_SOURCE
trust_script(HARNESS_SOURCE)  # zygotes may keep it compiled
