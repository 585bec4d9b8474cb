"""Every test module's file name is unique across the test folders: pytest imports test modules
by basename (rootdir-relative, no packages), so two files of one name in tests/unit and
tests/integration stop the whole suite at collection ("import file mismatch"), which a run of
one folder never shows."""
import ast
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_file_name():
    where = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        if path.name.startswith("test_") and "__pycache__" not in path.parts:
            where[path.name].append(str(path.relative_to(TESTS)))
    shared = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not shared, f"test modules sharing a file name: {shared}"


def test_the_long_modules_conftest_puts_first_exist():
    # a renamed long module would silently go back to its place in the order (tests/conftest.py;
    # read, not imported: tests/unit has a conftest module of its own)
    tree = ast.parse((TESTS / "conftest.py").read_text())
    long_modules = next(ast.literal_eval(node.value) for node in tree.body
                        if isinstance(node, ast.Assign)
                        and getattr(node.targets[0], "id", None) == "LONG_MODULES")
    names = {path.name for path in TESTS.rglob("test_*.py")}
    assert set(long_modules) <= names, set(long_modules) - names
