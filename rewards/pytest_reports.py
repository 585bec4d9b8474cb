"""Reading back the two records of a graded pytest run: pytest's junit XML and the summary the
grader's plugin writes (envs/testfile/plugin/). One reader for every verifier that runs
that plugin (the test-file verifier, envs/testfile/grading.py; the repo kind,
envs/repo/grading.py), so a record one of them refuses the other refuses too.

Both readers fail closed: anything that is not what pytest or the plugin writes (too big, not
parseable, entities, a missing attribute, a field of another type) is None, which the callers
turn into `forged_report` or `early_exit`, never into credit.
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

# The plugin's outcomes, worst last (envs/testfile/plugin/hooks.py ranks them the same way).
RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3, "timeout": 4}


def _strs(v: object) -> bool:
    return isinstance(v, list) and all(type(x) is str for x in v)


def read_summary(text: str | None, nonce: str, cap: int) -> dict | None:
    """The plugin's record, or None when absent, over `cap` characters, of another run's nonce
    or of any other shape than the plugin writes."""
    if text is None or len(text) > cap:
        return None
    try:
        rec = json.loads(text)
    except ValueError:
        return None
    ok = (isinstance(rec, dict) and rec.get("nonce") == nonce
          and type(rec.get("exitstatus")) is int and _strs(rec.get("collected"))
          and _strs(rec.get("flags")) and isinstance(rec.get("outcomes"), dict)
          and all(type(k) is str and v in RANK for k, v in rec["outcomes"].items())
          and isinstance(rec.get("errors"), dict) and _strs(list(rec["errors"].values()))
          and isinstance(rec.get("collect_errors"), list)
          and all(_strs(e) and len(e) == 2 for e in rec["collect_errors"])
          and (rec.get("internal_error") is None or type(rec["internal_error"]) is str)
          and isinstance(rec.get("cpu", {}), dict)
          and all(type(k) is str and type(v) is float for k, v in rec.get("cpu", {}).items())
          and type(rec.get("cpu_total", 0.0)) is float)
    return rec if ok else None


def junit_cases(text: str | None, cap: int) -> list[tuple[str, str, str, str]] | None:
    """The junit XML's test cases in file order as (classname, name, outcome, message), outcome
    passed|failed|skipped (a failure or an error is `failed`; message: the first failure's or
    error's); None when absent, over `cap`, with a DTD or an entity, unparseable, or with a
    case that lacks its classname or name."""
    if text is None or len(text) > cap or "<!DOCTYPE" in text or "<!ENTITY" in text:
        return None
    try:
        root = ET.fromstring(text)
    except (ET.ParseError, ValueError, RecursionError):
        return None
    out: list[tuple[str, str, str, str]] = []
    for case in root.iter("testcase"):
        cls, name = case.get("classname"), case.get("name")
        if cls is None or name is None:
            return None
        bad = [c for c in case if c.tag in ("failure", "error")]
        outcome = ("failed" if bad else
                   "skipped" if any(c.tag == "skipped" for c in case) else "passed")
        out.append((cls, name, outcome, (bad[0].get("message") or "") if bad else ""))
    return out
