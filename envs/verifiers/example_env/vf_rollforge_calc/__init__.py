"""A tool environment written as its users write them: a `vf.ToolEnv` with two tools, `add` and
`multiply`, over questions like "What is (a + b) * c?". The policy calls the tools (their
results come back as tool messages) and ends the episode with a reply that calls none, holding
the answer in <answer>...</answer>. Its rubric: `correct_answer` (1.0) pays 1 for the right
integer in the last reply; ToolEnv adds its own call counts (weight 0, metrics that do not
pay). The dataset is generated in memory (nothing downloaded)."""
import random

import verifiers as vf
from datasets import Dataset

SYSTEM_PROMPT = ("Use the tools to compute, then answer with the number only, inside "
                 "<answer>...</answer>, in a reply that calls no tool.")


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first integer
        b: the second integer
    """
    return int(a) + int(b)


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: the first integer
        b: the second integer
    """
    return int(a) * int(b)


def _rows(num_examples: int, seed: int) -> list[dict]:
    rng = random.Random(f"vf_rollforge_calc:{seed}")
    rows = []
    for _ in range(num_examples):
        a, b, c = rng.randint(2, 30), rng.randint(2, 30), rng.randint(2, 9)
        rows.append({"question": f"What is ({a} + {b}) * {c}?", "answer": str((a + b) * c)})
    return rows


def load_environment(num_examples: int = 20, seed: int = 0, max_turns: int = 4,
                     **kwargs) -> vf.Environment:
    parser = vf.XMLParser(fields=["answer"], answer_field="answer")

    def correct_answer(completion, answer, **_) -> float:
        got = parser.parse_answer(completion)
        return 1.0 if got is not None and got.strip() == answer else 0.0

    rubric = vf.Rubric(funcs=[correct_answer], weights=[1.0], parser=parser)
    return vf.ToolEnv(tools=[add, multiply], max_turns=max_turns,
                      dataset=Dataset.from_list(_rows(num_examples, seed)),
                      system_prompt=SYSTEM_PROMPT, parser=parser, rubric=rubric, **kwargs)
