"""A number-guessing environment written with openenv-core's server classes, for
tests/unit/test_env_openenv.py. It runs only in the openenv kind's venv (.openenv-venv), served
by the kind as `app: guess_env:app`.

reset(seed): the target is random.Random(seed).randint(1, 10). step(message): the guess; reward
1.0 and done when right, else 0.0 and a hint. Made to fail on demand: reset(explode=True)
raises, a message with "boom" raises, reset(nonce=True) shows a fresh random nonce (an
environment that does not replay).
"""
import os
import random
from typing import Any, Optional

from openenv.core.env_server import Action, Environment, Observation, State, create_app


class GuessAction(Action):
    message: str


class GuessObservation(Observation):
    text: str


class GuessEnvironment(Environment):
    def __init__(self) -> None:
        super().__init__()
        self._state = State()
        self._target = 0

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None,
              explode: bool = False, nonce: bool = False, **kwargs: Any) -> GuessObservation:
        if explode:
            raise ValueError("the guess env exploded on reset")
        self._target = random.Random(seed).randint(1, 10)
        self._state = State(episode_id=episode_id, step_count=0)
        extra = f" (nonce {os.urandom(4).hex()})" if nonce else ""
        return GuessObservation(text=f"Guess my number from 1 to 10.{extra}")

    def step(self, action: GuessAction, timeout_s: Optional[float] = None,
             **kwargs: Any) -> GuessObservation:
        if "boom" in action.message:
            raise RuntimeError("the guess env exploded on a step")
        self._state.step_count += 1
        try:
            guess = int(action.message.strip())
        except ValueError:
            return GuessObservation(text="Not a number.", reward=0.0)
        if guess == self._target:
            return GuessObservation(text="Right!", reward=1.0, done=True)
        return GuessObservation(text="Higher." if guess < self._target else "Lower.", reward=0.0)

    @property
    def state(self) -> State:
        return self._state


app = create_app(GuessEnvironment, GuessAction, GuessObservation, env_name="guess")
