"""Typed plain values on the wire between the grader and the sandbox.

Only exact builtin types cross: None, bool, int, float, str (as JSON scalars) and list, tuple,
dict, set, frozenset, bytes, complex (as one-key JSON objects, so a tuple stays a tuple). An object
of any other type, including a subclass of a builtin (which could override `__eq__` and lie), is
refused by `encode`. `decode` trusts nothing it reads: whatever the candidate's process prints,
it returns fresh builtin objects or raises `MalformedValue`.

This file is also shipped verbatim into the sandbox (it must stay stdlib-only and self-contained).
"""
import json

MAX_DEPTH = 64
MAX_NODES = 200_000


class NonPlainResult(TypeError):
    """A value that is not built only from exact builtin types."""


class MalformedValue(ValueError):
    """Wire data that no honest `encode` could have produced."""


_SCALARS = (type(None), bool, int, float, str)


def encode(v, depth=0):
    """Python value -> JSON-able structure; refuses anything but exact builtin types."""
    t = type(v)
    if depth > MAX_DEPTH:
        raise NonPlainResult("value nested deeper than %d" % MAX_DEPTH)
    if t in _SCALARS:
        return v
    if t is list or t is tuple or t is set or t is frozenset:
        items = [encode(x, depth + 1) for x in v]
        return {t.__name__: items}
    if t is dict:
        return {"dict": [[encode(k, depth + 1), encode(x, depth + 1)] for k, x in v.items()]}
    if t is bytes:
        return {"bytes": v.hex()}
    if t is complex:
        return {"complex": [v.real, v.imag]}
    raise NonPlainResult("value of non-plain type %s" % t.__name__)


def dumps(v):
    return json.dumps(encode(v))


def decode(data):
    """JSON-able structure -> fresh Python value of exact builtin types, or MalformedValue."""
    budget = [MAX_NODES]
    return _decode(data, 0, budget)


def _decode(d, depth, budget):
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise MalformedValue("value too large or too deep")
    t = type(d)
    if t in _SCALARS:
        return d
    if t is not dict or len(d) != 1:
        raise MalformedValue("unexpected %s on the wire" % t.__name__)
    (tag, body), = d.items()
    if tag in ("list", "tuple", "set", "frozenset", "dict", "complex") and type(body) is not list:
        raise MalformedValue("%s body is not a list" % tag)
    try:
        if tag == "list":
            return [_decode(x, depth + 1, budget) for x in body]
        if tag == "tuple":
            return tuple(_decode(x, depth + 1, budget) for x in body)
        if tag == "set":
            return {_decode(x, depth + 1, budget) for x in body}
        if tag == "frozenset":
            return frozenset(_decode(x, depth + 1, budget) for x in body)
        if tag == "dict":
            out = {}
            for pair in body:
                if type(pair) is not list or len(pair) != 2:
                    raise MalformedValue("dict item is not a pair")
                out[_decode(pair[0], depth + 1, budget)] = _decode(pair[1], depth + 1, budget)
            return out
        if tag == "bytes" and type(body) is str:
            return bytes.fromhex(body)
        if tag == "complex" and len(body) == 2 and all(type(x) in (int, float) for x in body):
            return complex(body[0], body[1])
    except TypeError as exc:  # unhashable set element or dict key
        raise MalformedValue(str(exc)) from None
    except ValueError as exc:
        raise MalformedValue(str(exc)) from None
    raise MalformedValue("unknown tag %r" % (tag,))
