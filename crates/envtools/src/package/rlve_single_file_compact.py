import copy
import random


def _last_boxed(text):
    start = text.rfind("\\boxed{")
    depth = 0
    for j in range(start + 6, len(text) if start >= 0 else 0):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[start + 7:j]
    return None


class __SPADE_NAME__Env:
    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self._env = None

    def reset(self, seed=None, difficulty=0):
        if isinstance(difficulty, bool) or not isinstance(difficulty, int) or difficulty < 0:
            raise ValueError(f"difficulty must be an integer >= 0, not {difficulty!r}")
        if seed is None:
            seed = random.randrange(2**31)
        controller = __SPADE_CTRL_CLASS__()
        for _ in range(difficulty):
            controller.update()
        random.seed(seed)
        parameter = random.choice(controller.get_parameter_list())
        env = __SPADE_ENV_CLASS__()
        env.seed = seed
        env.parameter = copy.deepcopy(parameter)
        random.seed(seed)
        env._generate()
        self._env, self._difficulty = env, difficulty
        self._answer = env.parameter.get("reference_answer", env.parameter.get("gold_answer"))
        return env.prompt_generator(), {"difficulty": difficulty, "has_answer": self._answer is not None}

    def step(self, action):
        answer = _last_boxed(action)
        if answer is not None:
            action += "\n" + self._env.answer_markers[0] + answer + self._env.answer_markers[1]
        try:
            correct = bool(self._env.verifier(action)["accuracy"])
        except Exception:
            correct = False
        expected = None if self._answer is None else str(self._answer)
        info = {"correct": correct, "difficulty": self._difficulty, "expected_answer": expected}
        observation = "Correct!" if correct else f"Incorrect. The answer was: {self._answer}"
        return observation, float(correct), True, False, info

    def solution(self):
        if self._answer is None:
            raise RuntimeError("__SPADE_NAME__ keeps no reference answer")
        return "\\boxed{" + str(self._answer) + "}"

    def close(self):
        self._env = None
