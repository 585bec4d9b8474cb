"""The code in an instruct model's answer. A base model (and the tiny default) continues the
prompt's function, so its text runs as is; an instruct model prompted through a chat template
answers the way it was tuned to: the whole function (often without the opening fence), a closing
fence, prose, a demo call and a `print`. What runs is the prompt followed by the definitions of
that answer, which redefine the prompt's stub; the row keeps both texts (`completion` and
`answer_executed`)."""
from __future__ import annotations

import ast
import re
import textwrap

from rewards import pyast

_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[ \t]*$", re.M)
# Top-level statements an answer keeps: what defines things. Calls, prints, asserts and
# `if __name__ == "__main__":` demos are the model showing its work, not the solution.
_KEEP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
         ast.Assign, ast.AnnAssign)


def _parses(source: str) -> bool:
    try:
        pyast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return True


def _code_blocks(text: str) -> list[str]:
    """Candidate code of `text`: each fenced block (fences paired in order), the text before
    the first fence when it bears no language (the model wrote the code straight after the
    generation prompt and only closed it), an opening fence's tail never closed (the answer was
    cut), or the whole text when it has no fence."""
    fences = list(_FENCE.finditer(text))
    if not fences:
        return [text]
    blocks = []
    if fences[0].group(1) == "" and text[:fences[0].start()].strip():
        blocks.append(text[:fences[0].start()])
    for offset in (0, 1):  # the first fence opening a block, or closing the code before it
        pairs = fences[offset:]
        for a, b in zip(pairs[0::2], pairs[1::2]):
            blocks.append(text[a.end() + 1:b.start()])
        if len(pairs) % 2:
            blocks.append(text[pairs[-1].end() + 1:])
    return [b for b in blocks if b.strip()]


def _longest_parsing_prefix(code: str) -> str | None:
    """`code` less trailing lines until it parses (prose after unfenced code)."""
    lines = code.rstrip().splitlines()
    for n in range(len(lines), 0, -1):
        head = "\n".join(lines[:n]) + "\n"
        if _parses(head):
            return head
    return None


def _returns(body: str) -> bool:
    try:
        tree = pyast.parse("def _f():\n" + textwrap.indent(body, "    "))
    except (SyntaxError, ValueError):
        return False
    return any(isinstance(n, (ast.Return, ast.Yield)) for n in ast.walk(tree))


def _definitions(code: str) -> str:
    tree = pyast.parse(code)
    lines = code.splitlines()
    kept = []
    for node in tree.body:
        if isinstance(node, _KEEP):
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            kept.append("\n".join(lines[start - 1:node.end_lineno]))
    return "\n".join(kept) + "\n" if kept else ""


def extract_answer(prompt: str, entry_point: str | None, text: str) -> str:
    """What to run after `prompt` for an instruct model's `text`: `text` itself when the
    prompt plus it is already a program (a continuation); else, from the first code block that
    defines `entry_point` (or the first block), its definitions on a fresh line (they redefine
    the prompt's stub), or a bare function body indented under the stub. When nothing of that
    makes a program, `text` (which then fails as a syntax error, as it would have)."""
    if _parses(prompt + text):
        return text
    blocks = [b for b in (_longest_parsing_prefix(textwrap.dedent(b)) for b in _code_blocks(text))
              if b]
    if entry_point:
        defining = re.compile(rf"^(async\s+)?def\s+{re.escape(entry_point)}\s*\(", re.M)
        blocks = [b for b in blocks if defining.search(b)] or blocks
    for code in blocks:
        first = next((ln for ln in code.splitlines() if ln.strip()), "")
        if re.match(r"(async\s+)?def\s|class\s|import\s|from\s|@", first):
            answer = "\n" + _definitions(code)
        elif _returns(code):  # a function body: indent it under the prompt's stub
            answer = textwrap.indent(code, "    ")
        else:  # prose that happens to parse ("Sure"), not a body
            continue
        if _parses(prompt + answer):
            return answer
    return text
