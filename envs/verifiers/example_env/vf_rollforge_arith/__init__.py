"""A verifiers environment written as its users write them: `load_environment(**args)` returns a
`vf.SingleTurnEnv` over an in-memory `datasets.Dataset` (generated, so nothing is downloaded)
with a rubric of two named reward functions.

Questions are sums and products of small integers; the answer goes in <answer>...</answer>.
`correct_answer` (weight 1.0) pays 1 for the right integer, `answer_format` (weight 0.2) pays 1
for an answer tag holding a bare integer. `lenient=True` grades as many math environments do:
the tag's text is parsed with sympy's `parse_expr` (which evaluates it as Python), so `6*7`
answers 42, and so would code: the rollforge kind's hack suite plays that. `fail_on_load=True`
makes loading raise (the kind's test of an environment that raises)."""
import random

import verifiers as vf
from datasets import Dataset
from sympy.parsing.sympy_parser import parse_expr  # at load: not on every answer's clock

SYSTEM_PROMPT = "Answer with the number only, inside <answer>...</answer>."


def _rows(num_examples: int, seed: int) -> list[dict]:
    rng = random.Random(f"vf_rollforge_arith:{seed}")
    rows = []
    for _ in range(num_examples):
        a, b, op = rng.randint(2, 99), rng.randint(2, 99), rng.choice("+*")
        rows.append({"question": f"What is {a} {op} {b}?",
                     "answer": str(a + b if op == "+" else a * b),
                     "info": {"op": op}})
    return rows


def load_environment(num_examples: int = 40, seed: int = 0, lenient: bool = False,
                     fail_on_load: bool = False, **kwargs) -> vf.Environment:
    if fail_on_load:
        raise RuntimeError("fail_on_load was set")
    parser = vf.XMLParser(fields=["answer"], answer_field="answer")

    def correct_answer(completion, answer, **_) -> float:
        got = parser.parse_answer(completion)
        if got is None:
            return 0.0
        if not lenient:
            return 1.0 if got.strip() == answer else 0.0
        try:
            return 1.0 if parse_expr(got.strip()) == int(answer) else 0.0
        except Exception:
            return 0.0

    def answer_format(completion, **_) -> float:
        got = parser.parse_answer(completion)
        return 1.0 if got is not None and got.strip().lstrip("-").isdigit() else 0.0

    rubric = vf.Rubric(funcs=[correct_answer, answer_format], weights=[1.0, 0.2], parser=parser)
    return vf.SingleTurnEnv(dataset=Dataset.from_list(_rows(num_examples, seed)),
                            system_prompt=SYSTEM_PROMPT, parser=parser, rubric=rubric, **kwargs)
