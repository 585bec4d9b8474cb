"""Reading a function harness's records back, trusting none of them, and the runtime flags
they reveal (the io and dataframe harness, envs/io/harness.py; the HumanEval one,
envs/humaneval/harness.py, per sample).

The candidate runs in a forked process of its own; a record reaches the stream read here only
when the guard wrote it, keyed, and the parent relayed it without the key (rewards/guard.py).
Whatever else the candidate wrote on the record pipe arrives as one `{"flag": "forged_record"}`
record, and a sample that ended before the harness was done as `{"flag": "early_exit"}`.
`parse_records` still trusts nothing: anything an honest harness never writes (a line that is
not JSON, an unknown shape, a second answer for one call, an index out of range, a record after
`done`) is dropped and flagged `forged_record`; a run that ended `ok` without `done` is flagged
`early_exit`, a `SystemExit` `exit_called`. `imitates_a_record` tells a forgery in the
candidate's prints (a record-shaped line: `fake_success_report`) from an honest program's
"3 passed"; the static checks (rewards/static_checks.py) use it on string literals too.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sandbox.base import ExecResult

# The shapes (key sets) of the records an honest harness writes, one JSON object a line.
_RECORD_SHAPES = ({"flag"}, {"done"}, {"loaded"}, {"load_error"}, {"i", "value"}, {"i", "error"})


@dataclass
class Records:
    values: dict[int, Any] = field(default_factory=dict)  # call index -> raw value from the wire
    errors: dict[int, str] = field(default_factory=dict)  # call index -> exception type name
    flags: list[str] = field(default_factory=list)  # runtime hack flags, in order first seen
    done: bool = False
    loaded: bool = False
    load_error: str | None = None

    def flag(self, name: str) -> None:
        if name not in self.flags:
            self.flags.append(name)


def imitates_a_record(text: str) -> bool:
    """Whether a line of `text` (the candidate's prints) has the shape of a harness record.

    The grade comes from the harness's records on their own channel, never from prints, so an
    honest program's "ok", "3 passed" or "All tests passed" deceives nothing and is not flagged.
    What only a forgery needs is the harness's protocol: a record-shaped line in the prints is an
    attempt to forge one (`fake_success_report`); one that reaches the record channel is caught
    there (`forged_record`), as is ending with success before the harness did (`early_exit`)."""
    for line in text.splitlines():
        line = line.strip()
        if not (line.startswith("{") and line.endswith("}")):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and set(rec) in _RECORD_SHAPES:
            return True
    return False


def parse_records(res: ExecResult, n_calls: int) -> Records:
    """Parse the harness records on `res.stdout` and add the flags the execution reveals."""
    rec_out = Records()
    lines = res.stdout.splitlines()
    if res.status == "output_truncated" and lines and not res.stdout.endswith("\n"):
        lines = lines[:-1]  # cut mid-record by the output cap: not a forgery
    for line in lines:
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            rec_out.flag("forged_record")
            continue
        if not isinstance(rec, dict) or rec_out.done:
            rec_out.flag("forged_record")
            continue
        keys = set(rec)
        if keys == {"flag"} and isinstance(rec["flag"], str):
            rec_out.flag(rec["flag"][:64])
        elif keys == {"done"} and rec["done"] is True:
            rec_out.done = True
        elif keys == {"loaded"} and rec["loaded"] is True and not rec_out.loaded:
            rec_out.loaded = True
        elif keys == {"load_error"} and rec_out.load_error is None and not rec_out.loaded:
            rec_out.load_error = str(rec["load_error"])[:400]
        elif (keys in ({"i", "value"}, {"i", "error"}) and type(rec["i"]) is int
              and 0 <= rec["i"] < n_calls and rec["i"] not in rec_out.values
              and rec["i"] not in rec_out.errors):
            if "value" in rec:
                rec_out.values[rec["i"]] = rec["value"]
            else:
                rec_out.errors[rec["i"]] = str(rec["error"])[:64]
        else:
            rec_out.flag("forged_record")
    if not rec_out.done and res.status == "ok":
        rec_out.flag("early_exit")  # ended the process with success before the harness finished
    if "SystemExit" in rec_out.errors.values() or (rec_out.load_error or "").startswith("SystemExit"):
        rec_out.flag("exit_called")
    if imitates_a_record(res.stderr):
        rec_out.flag("fake_success_report")
    return rec_out
