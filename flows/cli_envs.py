"""`rollforge envs`: the kinds of environment, built-in and plug-in, with their options."""
from __future__ import annotations

import argparse
import json


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "envs", help="list the environment kinds (built-in and plug-in) and their options",
        description="List every kind of environment a task source can name: the built-ins, "
        "the plug-ins of the entry-point group 'rollforge.environments', each with its "
        "options (the `options:` of a source in tasks.sources) and task payload fields. A "
        "plug-in that fails to import is listed with its error.")
    p.add_argument("kind", nargs="?", help="show only this kind (a name or module:Class)")
    p.add_argument("--json", action="store_true", help="as JSON (one object per kind)")
    p.set_defaults(func=_envs)


def _fields(model) -> list[dict]:
    if model is None:
        return []
    out = []
    for name, f in model.model_fields.items():
        default = None if f.is_required() else f.get_default(call_default_factory=True)
        out.append({"name": name, "type": _type_name(f.annotation),
                    "default": default if _jsonable(default) else repr(default),
                    "required": f.is_required(), "description": f.description or ""})
    return out


def _type_name(t) -> str:
    return getattr(t, "__name__", None) if getattr(t, "__args__", None) is None else \
        str(t).replace("typing.", "")


def _jsonable(v) -> bool:
    try:
        json.dumps(v)
        return True
    except TypeError:
        return False


def describe(name: str, path: str, origin: str) -> dict:
    from envs.base import EnvError
    from envs.registry import BUILTIN, kind_class

    if origin == "plug-in" and name in BUILTIN:
        return {"kind": name, "path": path, "origin": origin,
                "error": f"its name is a built-in kind's ({BUILTIN[name]}), which wins; "
                         f"rename the entry point"}
    try:
        cls = kind_class(name)
    except EnvError as exc:
        return {"kind": name, "path": path, "origin": origin, "error": str(exc)}
    return {"kind": name, "path": path, "origin": origin, "description": cls.description,
            "multi_turn": cls.max_turns != 1 if isinstance(cls.max_turns, int) else True,
            "options": _fields(cls.Config), "payload": _fields(cls.Payload)}


def _envs(args: argparse.Namespace) -> int:
    from flows.cli import UsageError
    from envs.registry import BUILTIN, plugins

    rows = [(n, p, "built-in") for n, p in BUILTIN.items()]
    rows += [(n, p, "plug-in") for n, p in plugins().items()]
    if args.kind:
        rows = [r for r in rows if r[0] == args.kind] or (
            [(args.kind, args.kind, "import path")] if ":" in args.kind else [])
        if not rows:
            raise UsageError(f"unknown kind {args.kind!r}; `rollforge envs` lists them")
    infos = [describe(*r) for r in rows]
    if args.json:
        print(json.dumps(infos, indent=2, default=str))
        return 0
    for info in infos:
        head = f"{info['kind']}  ({info['origin']}: {info['path']})"
        if "error" in info:
            print(f"{head}\n  cannot be loaded: {info['error']}\n")
            continue
        print(f"{head}\n  {info['description']}" + ("  [multi-turn]" if info["multi_turn"] else ""))
        for section in ("options", "payload"):
            if info[section]:
                print(f"  {section}:")
                for f in info[section]:
                    d = "required" if f["required"] else f"default {f['default']!r}"
                    print(f"    {f['name']} ({f['type']}, {d}): {f['description']}".rstrip(": "))
        print()
    return 1 if any("error" in i for i in infos) else 0
