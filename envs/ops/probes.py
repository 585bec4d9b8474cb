"""State probes: named checks of a system tree after the script ran, each a plain function of
the final state, the initial state and the parsed configs.

A probe is data in the task (`{"name": "port set", "type": "ini", "path": ..., ...}`), so a task
file can carry its own. Probes read the host-side copy of the tree (`sandbox.rootfs.snapshot`)
after every process of the run is gone; they never follow a link out of it. Parsing configs the
candidate wrote (ini, JSON, YAML, crontab lines, passwd/group files) happens in a fresh sandbox
execution (`CHECK_SOURCE`, the system's python3 with its own parsers), never in the grader.

`requires` names probes that must pass first. On top of it, `verdicts` gates by what each probe
says (issue 34): a probe that the untouched system or a wiped one already passes ("nothing else
changed", "valid", "gone", a rollback that brings back what was) tells nothing about the change,
so it passes only when every probe that neither passes did; with no such probe, only all of
them together pass. `idempotent` (envs/ops/env.py) passes only when every probe passed.
Line probes and the cron, passwd and group parsers split lines at newlines only, as their real
readers do. Kinds of probe (their arguments):

| type | passes when |
|---|---|
| `file` (path, content?, mode?, lines?, absent_lines?) | a regular file (not a link) with exactly `content`, the mode, each of `lines` exactly once and none of `absent_lines` |
| `dir` (path, mode?) | a folder (not a link) with the mode |
| `absent` (path) | nothing at the path |
| `link` (path, to) | a symlink that leads, inside the system, to `to` |
| `valid` (path, format) | the file parses as `format` (ini, json, yaml, cron, passwd, group) |
| `value` (path, format, keys, value) | the parsed value at `keys` (a list) equals `value` |
| `contains` (path, format, keys, item) | the parsed list at `keys` holds `item` |
| `same_except` (path, format, except) | the parsed file equals the initial one but for the `except` key paths |
| `unchanged` (paths) | each path is as it was (content, mode, link target) |
| `gzip` (path, content) | a gzip file whose uncompressed bytes are `content` |
| `archive` (path, members) | a tar (gzip'd or not) whose regular-file members are exactly `members` (name -> content) |
| `rollback` (script, paths) | running `script` on a copy of the final system brings each path back as it was |
"""
from __future__ import annotations

import gzip
import io
import json
import tarfile
from typing import Any, Callable, Mapping

from envs.ops.integrity import expands_past
from sandbox.rootfs import Node, canonical, resolve

FORMATS = ("ini", "json", "yaml", "cron", "passwd", "group")
FILE_TYPES = ("file", "dir", "valid", "value", "contains", "same_except", "gzip", "archive")
PROBE_TYPES = FILE_TYPES + ("absent", "link", "unchanged", "rollback")

# The checker the sandbox runs over copies of the files to parse: one JSON line per file,
# {"i": n, "ok": bool, "data": <the parsed value as JSON>} or {"i": n, "ok": false, "error": name}.
CHECK_SOURCE = r'''
import configparser, json, re, sys

def ini(text):
    cp = configparser.ConfigParser(interpolation=None, strict=True)
    cp.optionxform = str
    cp.read_string(text)
    return {s: dict(cp[s]) for s in cp.sections()}

def yaml_(text):
    import yaml
    return yaml.safe_load(text)

_F = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]
_ITEM = re.compile(r"(\*|\d+(-\d+)?)(/\d+)?$")

def cron(text):
    out = []
    for line in text.split("\n"):
        s = line.strip()
        if not s or s.startswith("#") or re.match(r"[A-Za-z_][A-Za-z0-9_]*=", s):
            continue
        f = s.split(None, 6)
        if len(f) < 7:
            raise ValueError("fields")
        for (lo, hi), spec in zip(_F, f[:5]):
            for item in spec.split(","):
                m = _ITEM.match(item)
                if not m:
                    raise ValueError("field")
                nums = [int(x) for x in re.findall(r"\d+", m.group(1))]
                if any(n < lo or n > hi for n in nums):
                    raise ValueError("range")
        out.append(f)
    return out

def passwd(text):
    recs = [l.split(":") for l in text.split("\n") if l.strip()]
    if any(len(r) != 7 or not r[0] or not r[2].isdigit() or not r[3].isdigit() for r in recs):
        raise ValueError("record")
    if len({r[0] for r in recs}) < len(recs) or len({r[2] for r in recs}) < len(recs):
        raise ValueError("duplicate")
    return recs

def group(text):
    recs = [l.split(":") for l in text.split("\n") if l.strip()]
    if any(len(r) != 4 or not r[0] or not r[2].isdigit() for r in recs):
        raise ValueError("record")
    if len({r[0] for r in recs}) < len(recs) or len({r[2] for r in recs}) < len(recs):
        raise ValueError("duplicate")
    return recs

P = {"ini": ini, "json": json.loads, "yaml": yaml_, "cron": cron, "passwd": passwd,
     "group": group}
LINES = ("cron", "passwd", "group")  # read as their readers do: a line ends at a newline
for i, (name, fmt) in enumerate(json.load(open("case.json"))):
    try:
        text = open(name, encoding="utf-8", newline="").read()
        if fmt not in LINES:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        data = P[fmt](text)
        json.dumps(data)
        rec = {"i": i, "ok": True, "data": data}
    except Exception as exc:
        rec = {"i": i, "ok": False, "error": type(exc).__name__}
    print(json.dumps(rec), flush=True)
'''


class Parsed:
    """Parsed configs by (state, path, format); state is "final" or "initial". A missing entry
    (the file was absent, not a regular file, or the checker did not answer) parses as nothing."""

    def __init__(self, values: Mapping[tuple[str, str, str], tuple[bool, Any]]) -> None:
        self.values = dict(values)

    def get(self, state: str, path: str, fmt: str) -> tuple[bool, Any]:
        return self.values.get((state, path, fmt), (False, None))

    def untouched(self) -> "Parsed":
        """The parses as they would be had the script changed nothing: final = initial."""
        initial = {(path, fmt): v for (state, path, fmt), v in self.values.items()
                   if state == "initial"}
        return Parsed({(state, path, fmt): v for (path, fmt), v in initial.items()
                       for state in ("final", "initial")})


def wanted_parses(probes: list[dict]) -> list[tuple[str, str, str]]:
    """(state, path, format) every probe needs parsed: the final file, and the initial one
    (`same_except` compares with it; `verdicts` asks whether the untouched system passes)."""
    out: list[tuple[str, str, str]] = []
    for p in probes:
        if p["type"] in ("valid", "value", "contains", "same_except"):
            out += [("final", p["path"], p["format"]), ("initial", p["path"], p["format"])]
    return list(dict.fromkeys(out))


def _dig(data: Any, keys: list) -> tuple[bool, Any]:
    for k in keys:
        if isinstance(data, dict) and k in data:
            data = data[k]
        elif isinstance(data, list) and isinstance(k, int) and 0 <= k < len(data):
            data = data[k]
        else:
            return False, None
    return True, data


def _drop(data: Any, keys: list) -> Any:
    if not keys or not isinstance(data, dict):
        return data
    data = dict(data)
    if len(keys) == 1:
        data.pop(keys[0], None)
    elif keys[0] in data:
        data[keys[0]] = _drop(data[keys[0]], keys[1:])
    return data


def _lines(node: Node) -> list[str]:
    # newlines only: str.splitlines also breaks at \v, \f, \x85... where cron reads one line
    return node.data.decode("utf-8", "replace").split("\n")


def _file(p: dict, final: Mapping[str, Node], initial, parsed) -> bool:
    n = final.get(p["path"])
    if n is None or n.kind != "file":
        return False
    if "content" in p and n.data != p["content"].encode():
        return False
    if "mode" in p and n.mode != p["mode"]:
        return False
    lines = _lines(n)
    return all(lines.count(x) == 1 for x in p.get("lines", ())) and \
        not any(x in lines for x in p.get("absent_lines", ()))


def _dir(p, final, initial, parsed) -> bool:
    n = final.get(p["path"])
    return n is not None and n.kind == "dir" and ("mode" not in p or n.mode == p["mode"])


def _absent(p, final, initial, parsed) -> bool:
    return p["path"] not in final


def _link(p, final, initial, parsed) -> bool:
    n = final.get(p["path"])
    return n is not None and n.kind == "link" and resolve(final, p["path"]) == p["to"]


def _valid(p, final, initial, parsed) -> bool:
    return parsed.get("final", p["path"], p["format"])[0]


def _value(p, final, initial, parsed) -> bool:
    ok, data = parsed.get("final", p["path"], p["format"])
    found, v = _dig(data, p["keys"]) if ok else (False, None)
    return found and json.dumps(v) == json.dumps(p["value"])  # 8080 is not "8080" nor True


def _contains(p, final, initial, parsed) -> bool:
    ok, data = parsed.get("final", p["path"], p["format"])
    found, v = _dig(data, p["keys"]) if ok else (False, None)
    return found and isinstance(v, list) and any(json.dumps(x) == json.dumps(p["item"]) for x in v)


def _same_except(p, final, initial, parsed) -> bool:
    ok, now = parsed.get("final", p["path"], p["format"])
    ok0, before = parsed.get("initial", p["path"], p["format"])
    if not (ok and ok0):
        return False
    for keys in p["except"]:
        now, before = _drop(now, keys), _drop(before, keys)
    return json.dumps(now, sort_keys=True) == json.dumps(before, sort_keys=True)


def same_node(a: Node | None, b: Node | None, tree_a, tree_b, path: str) -> bool:
    """Two states agree at `path`; a link by where it leads (relative or absolute alike)."""
    if a is not None and b is not None and a.kind == b.kind == "link":
        return resolve(tree_a, path) == resolve(tree_b, path)
    return canonical(a) == canonical(b)


def _unchanged(p, final, initial, parsed) -> bool:
    return all(same_node(final.get(q), initial.get(q), final, initial, q) for q in p["paths"])


def _gzip(p, final, initial, parsed) -> bool:
    n = final.get(p["path"])
    if n is None or n.kind != "file" or n.data[:2] != b"\x1f\x8b" or expands_past(n.data):
        return False
    try:
        return gzip.decompress(n.data) == p["content"].encode()
    except (OSError, EOFError, ValueError):
        return False


def _archive(p, final, initial, parsed) -> bool:
    n = final.get(p["path"])
    if n is None or n.kind != "file" or expands_past(n.data):
        return False
    try:
        with tarfile.open(fileobj=io.BytesIO(n.data), mode="r:*") as tf:
            got = {}
            for m in tf.getmembers():
                if m.isfile():
                    got[m.name.removeprefix("./")] = tf.extractfile(m).read()
                elif not m.isdir():
                    return False  # a link or device in the archive: not what was asked
    except (OSError, EOFError, tarfile.TarError, ValueError):
        return False
    return got == {k: v.encode() for k, v in p["members"].items()}


CHECKS: dict[str, Callable[..., bool]] = {
    "file": _file, "dir": _dir, "absent": _absent, "link": _link, "valid": _valid,
    "value": _value, "contains": _contains, "same_except": _same_except,
    "unchanged": _unchanged, "gzip": _gzip, "archive": _archive,
}


def verdicts(probes: list[dict], final: Mapping[str, Node], initial: Mapping[str, Node],
             parsed: Parsed, rolled: Mapping[str, bool] | None = None) -> dict[str, bool]:
    """Each probe's verdict on the final state (`rolled`: the rollback probes' runs). A probe
    passes when its `requires` passed and its check holds. One that also holds on the untouched
    or on the wiped system (`weak_probes`) says nothing about the change, so it passes only if
    every probe that holds on neither passed too (with no such probe: only if all pass)."""
    rolled = rolled or {}
    raw: dict[str, bool] = {}
    for q in probes:
        raw[q["name"]] = all(raw.get(r, False) for r in q.get("requires", ())) and (
            rolled.get(q["name"], False) if q["type"] == "rollback"
            else CHECKS[q["type"]](q, final, initial, parsed))
    weak = weak_probes(probes, initial, parsed)
    strong = [name for name in raw if name not in weak]
    proven = all(raw[name] for name in strong) if strong else all(raw.values())
    return {name: ok and (name not in weak or proven) for name, ok in raw.items()}


def weak_probes(probes: list[dict], initial: Mapping[str, Node], parsed: Parsed) -> set[str]:
    """Names of the probes a script passes without the change: on the system as it was (the
    empty script) or on one with every path gone (`rm -rf`). A rollback probe is one by
    nature: on an unchanged system any script 'brings back' what was."""
    untouched, none = parsed.untouched(), Parsed({})
    return {q["name"] for q in probes if q["type"] == "rollback"
            or CHECKS[q["type"]](q, initial, initial, untouched)
            or CHECKS[q["type"]](q, {}, initial, none)}
