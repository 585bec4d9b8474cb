"""What runs of an instruct model's answer (envs/answers.py): a continuation as is; the code of
a fenced block, or of code the model only closed with a fence, less its prose and demo calls;
a bare body under the prompt's stub; and the text itself when nothing makes a program."""
import ast

import pytest

from envs.answers import extract_answer
from flows.episodes import play
from training.tokenizer import ByteTokenizer

PROMPT = 'def add(x):\n    """Return x plus 2.\n    >>> add(100)\n    102\n    """\n'


def _runs(answer: str) -> int:
    scope: dict = {}
    exec(compile(PROMPT + answer, "solution.py", "exec"), scope)  # noqa: S102
    return scope["add"](100)


@pytest.mark.parametrize("text", [
    # measured from SmolLM2-135M-Instruct: the code straight after the generation prompt, a
    # demo call and a print, a closing fence, prose
    'def add(x):\n    return x + 2\n\nadd(100)\nprint(add(100))  # Output: 102\n```\n\n'
    "This function uses Python's built-in `add` function.",
    'Sure! Here it is:\n```python\nimport math\n\ndef add(x):\n    return x + 2\n\n'
    'print(add(3))\n```\nDone.',
    'Sure\n```\ndef add(x):\n    return x + 2\n```\n',
    'return x + 2\n```\nprose',
    '```python\ndef add(x):\n    return x + 2\n',  # cut before the closing fence
])
def test_the_code_of_an_instruct_answer_runs_without_its_prose_and_demo_calls(text):
    answer = extract_answer(PROMPT, "add", text)
    assert answer != text and "print" not in answer and "```" not in answer
    assert _runs(answer) == 102


def test_a_continuation_that_already_parses_runs_as_is():
    assert extract_answer(PROMPT, "add", "    return x + 2\n") == "    return x + 2\n"


def test_prose_alone_is_left_to_fail_as_the_syntax_error_it_is():
    text = "I cannot help with that, it's unclear."
    assert extract_answer(PROMPT, "add", text) == text
    with pytest.raises(SyntaxError):
        ast.parse(PROMPT + text)


def test_the_block_that_defines_the_entry_point_wins_over_an_earlier_one():
    text = "```python\nx = 1\n```\nand\n```python\ndef add(x):\n    return x + 2\n```"
    assert _runs(extract_answer(PROMPT, "add", text)) == 102


class _ChatTokenizer(ByteTokenizer):
    """Byte ids, but seen as an instruct model's tokenizer (prompts in a chat template)."""

    kind = "hf"
    use_chat_template = True


@pytest.mark.parametrize("tok,rewritten", [(ByteTokenizer(), False), (_ChatTokenizer(), True)])
def test_only_an_instruct_policy_has_its_answer_rewritten_before_it_runs(tok, rewritten):
    """The tiny default (byte tokenizer, no chat template) always runs its raw text."""
    from envs.io import FunctionsEnv
    from tasks.record import Task, TestCase
    from training.generate import Sample

    task = Task(task_id="t", suite="s", family="add", difficulty=1, prompt=PROMPT,
                entry_point="add", tests=(TestCase(args=(1,), expected=3),), split="train")
    text = "```python\ndef add(x):\n    return x + 2\n```"

    def sample_fn(turn, contexts, episodes, n, k):
        return [Sample(c, tok.encode(text, bos=False), [0.0] * len(text), text, True)
                for c in contexts], 0.0

    seen = []

    def step_fn(turn, items):
        seen.extend(a for _, _, a in items)
        raise StopIteration

    with pytest.raises(StopIteration):
        play([task], [FunctionsEnv()], 1, 4096, tok, 64, sample_fn, step_fn)
    assert seen == ([extract_answer(PROMPT, "add", text)] if rewritten else [text])
