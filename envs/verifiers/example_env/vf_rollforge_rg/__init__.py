"""verifiers' own reasoning-gym environment (`vf.ReasoningGymEnv`, shipped in verifiers), as a
user exposes a class by id: a `load_environment` that builds it. Its rows' `answer` is the
entry's index into the generated dataset (the rubric's `check_answer_reward_func` looks the
entry up and calls reasoning-gym's `score_answer`), so a row has no reference answer."""
import verifiers as vf


def load_environment(gym: str = "basic_arithmetic", num_train_examples: int = 20,
                     num_eval_examples: int = 5, seed: int = 0) -> vf.Environment:
    return vf.ReasoningGymEnv(gym=gym, num_train_examples=num_train_examples,
                              num_eval_examples=num_eval_examples, seed=seed)
