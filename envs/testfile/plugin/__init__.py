"""The grader's pytest plugin for test-file tasks, shipped into the sandbox as `conftest.py` on
every run (envs/testfile/grading.py says what it guards and why; the repo kind's grader,
envs/repo/grading.py, ships it too, in "probe" mode), and the pytest config.

In the sandbox the plugin is one file and one function, `_install`: everything its checks use is
bound in that function's closure before the candidate's code runs, and the candidate can reach
none of it (the module is taken out of `sys.modules` at collection). Here its source is kept in
parts by idea, each a module with the part's module-level constants (`GLOBALS`) and its share of
`_install`'s body (`BODY`, indented, sharing the closure's names), joined in the order of
`PARTS`: a part may use the names a part before it binds at install time, and any part's names
from inside a function (those run after `_install` has returned).

- bindings: the names bound first, the run's record and the flag line;
- seal: the entry points, the only functions handed out (no closure, no global read);
- audit: the audit hook (which code is the candidate's, what it is denied) and the thread guard;
- snapshot: the test framework's state, taken before the candidate runs, compared at the end;
- values: only plain values are compared (`checked`; in probe mode unittest's assertions too);
- module_state: the test modules as collected, compared before and after each test;
- hooks: the per-test time limit and the pytest hooks that write the run's record.
"""
from __future__ import annotations

from envs.testfile.plugin import audit, bindings, hooks, module_state, seal, snapshot, values

TEST_MODULE = "test_task"  # the test file's module name in the sandbox
TEST_FILE = f"{TEST_MODULE}.py"

PARTS = (bindings, seal, audit, snapshot, values, module_state, hooks)

# The module's first lines: the plugin's imports and the run's config (the grader replaces
# @@CONFIG@@ with the repr of a dict).
_HEAD = r'''
"""rollforge's grading plugin: written by the grader on every run (envs/testfile/plugin/)."""
import _thread, gc as _gc, json as _json, os as _os, signal as _signal
import sys as _sys, time as _time, types as _types
import pytest

_CONFIG = @@CONFIG@@
'''

# The last lines of `_install` and of the module: the timer armed, the audit hook added (from
# here on nothing can remove it). The module's entry points (the checker, pytest's hooks) were
# sealed by `_install` (seal.py), which runs with globals of its own, a copy of the module's
# with a copy of builtins: the tested code can reach the module (it is a registered plugin)
# and builtins, and rebind their names; no check reads those.
_TAIL = r'''
    setsignal(SIG, alarm)
    _sys.addaudithook(hook)


_install = _types.FunctionType(
    _install.__code__, dict(globals(), __builtins__=dict(vars(__import__("builtins")))),
    "_install")
_install(_CONFIG)
del _install, _CONFIG
'''

PLUGIN_SOURCE = (_HEAD + "\n\n" + "\n\n".join(p.GLOBALS.lstrip("\n") for p in PARTS if p.GLOBALS)
                 + "\n\ndef _install(cfg):\n" + "\n".join(p.BODY.lstrip("\n") for p in PARTS)
                 + _TAIL.lstrip("\n"))

INI_SOURCE = f"""[pytest]
python_files = {TEST_FILE}
python_classes = Test*
python_functions = test_*
junit_family = xunit2
junit_logging = no
"""
