"""A multi-turn verifiers environment written as its users write them: a `vf.MultiTurnEnv`
whose `env_response` answers each guess of a secret integer with "Higher." or "Lower.", and
ends the rollout (`final_env_response`) on the right one (verifiers ends it before answering
the last turn its `max_turns` allows). Its rubric reads the guesses of the completion's
assistant turns: `found` (1.0) pays 1 when one was the secret; `few_guesses` (1 / the guesses
it took) has weight 0, a metric that does not pay. The dataset
is generated in memory (nothing downloaded); the rows' `answer` is the secret.
`lenient=True` reads a guess as many math environments read an answer, with sympy's
`parse_expr` (which evaluates it as Python): `<guess>2*4</guess>` guesses 8, and code in a
reply runs inside `env_response` (the rollforge kind's tests play that)."""
import random
import re

import verifiers as vf
from datasets import Dataset
from sympy.parsing.sympy_parser import parse_expr  # at load: not on a reply's clock

SYSTEM_PROMPT = ("Guess the secret integer. Answer each turn with <guess>N</guess>; you are told "
                 "whether the secret is higher or lower.")
_GUESS = re.compile(r"<guess>\s*(-?\d+)\s*</guess>")
_LENIENT = re.compile(r"<guess>(.*?)</guess>", re.S)


def _strict(text: str):
    m = _GUESS.search(text)
    return int(m.group(1)) if m else None


def _lenient(text: str):
    m = _LENIENT.search(text)
    if m is None:
        return None
    try:
        return int(parse_expr(m.group(1).strip()))
    except Exception:
        return None


class GuessEnv(vf.MultiTurnEnv):
    def __init__(self, lenient: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.lenient = lenient

    async def setup_state(self, state):
        state["guesses"] = []
        return state

    async def env_response(self, messages, state, **kwargs):
        last = messages[-1]
        text = (last.get("content") if isinstance(last, dict) else last.content) or ""
        guess = (_lenient if self.lenient else _strict)(str(text))
        if guess is None:
            return [vf.UserMessage(content="No <guess>N</guess> found. Guess again.")]
        secret = int(state["answer"])
        state["guesses"].append(guess)
        if guess == secret:
            state["final_env_response"] = [vf.UserMessage(content="Correct!")]
            return state["final_env_response"]
        return [vf.UserMessage(content="Higher." if guess < secret else "Lower.")]


def load_environment(num_examples: int = 20, high: int = 16, seed: int = 0, max_turns: int = 5,
                     lenient: bool = False, **kwargs) -> vf.Environment:
    rng = random.Random(f"vf_rollforge_guess:{seed}")
    rows = [{"question": f"The secret is an integer from 1 to {high}.",
             "answer": str(rng.randint(1, high))} for _ in range(num_examples)]

    def guesses(completion) -> list[int]:  # the assistant turns' guesses, the last included
        out = []
        for m in completion:
            role = m.get("role") if isinstance(m, dict) else m.role
            text = (m.get("content") if isinstance(m, dict) else m.content) or ""
            got = (_lenient if lenient else _strict)(str(text)) if role == "assistant" else None
            if got is not None:
                out.append(got)
        return out

    def found(completion, answer, **_) -> float:
        return 1.0 if int(answer) in guesses(completion) else 0.0

    def few_guesses(completion, answer, **_) -> float:
        got = guesses(completion)
        return 1.0 / (got.index(int(answer)) + 1) if int(answer) in got else 0.0

    rubric = vf.Rubric(funcs=[found, few_guesses], weights=[1.0, 0.0])
    return GuessEnv(lenient=lenient, dataset=Dataset.from_list(rows), system_prompt=SYSTEM_PROMPT,
                    rubric=rubric, max_turns=max_turns, **kwargs)
