import copy
import random


def _last_boxed(text):
    """The content of the last `\\boxed{...}` in `text` (braces balanced), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i = start + len("\\boxed{")
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


class __SPADE_NAME__Env:
    """RLVE's __SPADE_NAME__: one problem per episode, answered inside \\boxed{...}."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self._env = None
        self._answer = None
        self._difficulty = 0

    def reset(self, seed=None, difficulty=0):
        if isinstance(difficulty, bool) or not isinstance(difficulty, int) or difficulty < 0:
            raise ValueError(f"difficulty must be an integer >= 0, not {difficulty!r}")
        if seed is None:
            seed = random.randrange(2**31)
        # The controller's parameters at this difficulty, then one of them chosen by the seed.
        controller = __SPADE_CTRL_CLASS__()
        for _ in range(difficulty):
            controller.update()
        random.seed(seed)
        parameter = random.choice(controller.get_parameter_list())
        env = __SPADE_ENV_CLASS__()
        env.seed = seed
        env.parameter = copy.deepcopy(parameter)
        random.seed(seed)
        try:
            env._generate()
        except Exception as exc:
            raise RuntimeError(
                f"RLVE's generator failed for __SPADE_NAME__ at difficulty {difficulty} "
                f"(parameters {parameter!r}, seed {seed}): {type(exc).__name__}: {exc}"
            ) from exc
        if env.parameter is None:
            raise RuntimeError(
                f"RLVE's generator gave no problem for __SPADE_NAME__ at difficulty "
                f"{difficulty} (parameters {parameter!r}, seed {seed})"
            )
        self._env = env
        self._difficulty = difficulty
        self._answer = env.parameter.get("reference_answer", env.parameter.get("gold_answer"))
        info = {"difficulty": difficulty, "has_answer": self._answer is not None}
        return env.prompt_generator(), info

    def step(self, action):
        if self._env is None:
            raise RuntimeError("step() before reset()")
        # The last \boxed{...} is scored as RLVE's own answer markers.
        answer = _last_boxed(action)
        if answer is not None:
            action = action + "\n" + self._env.answer_markers[0] + answer + self._env.answer_markers[1]
        try:
            correct = bool(self._env.verifier(action)["accuracy"])
        except Exception:
            correct = False
        observation = "Correct!" if correct else f"Incorrect. The answer was: {self._answer}"
        info = {
            "correct": correct,
            "difficulty": self._difficulty,
            "expected_answer": None if self._answer is None else str(self._answer),
        }
        return observation, 1.0 if correct else 0.0, True, False, info

    def solution(self):
        if self._answer is None:
            raise RuntimeError("__SPADE_NAME__ keeps no reference answer")
        return "\\boxed{" + str(self._answer) + "}"

    def close(self):
        self._env = None
        self._answer = None
