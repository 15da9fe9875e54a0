# --- spade's adapter for an RLVE environment --------------------------------------------------
# RLVE (`rlve-gym`, package `Gym`) environments are single-turn generator/scorer classes with a
# parameter controller for difficulty. This class plays one as a spade environment, as the
# SPADE reference's fixed-env mode does (`RlveGymWrapper`): `reset(seed, difficulty)` builds the
# controller's parameters at that difficulty and generates a problem; `step(answer)` scores a
# `\boxed{...}` (or `<answer>...</answer>`) answer, 1 if it is correct and 0 otherwise, and ends
# the episode. The generation is RLVE's `generator()` without its thread-pool timeout and its
# numpy/torch seeding: the sandbox bounds every call itself, and `random` is the generator the
# environments draw from.
import copy as _spade_copy
import random as _spade_random

from __SPADE_ENV_MODULE__ import __SPADE_ENV_CLASS__ as _SpadeRlveEnvironment
from __SPADE_CTRL_MODULE__ import __SPADE_CTRL_CLASS__ as _SpadeRlveController


def _spade_last_boxed(text):
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
    """RLVE's `__SPADE_NAME__`, one problem per episode."""

    rlve_name = "__SPADE_NAME__"

    def __init__(self, max_turns=None):
        self.max_turns = max_turns
        self._env = None
        self._answer = None
        self._difficulty = 0

    def reset(self, seed=None, difficulty=0):
        if isinstance(difficulty, bool) or not isinstance(difficulty, int) or difficulty < 0:
            raise ValueError(f"difficulty must be an integer >= 0, not {difficulty!r}")
        if seed is None:
            seed = _spade_random.randrange(2**31)
        # The controller's parameters at this difficulty: `difficulty` updates from its start,
        # then one of its parameter dicts, chosen by the seed.
        controller = _SpadeRlveController()
        for _ in range(difficulty):
            controller.update()
        _spade_random.seed(seed)
        parameter = _spade_random.choice(controller.get_parameter_list())
        env = _SpadeRlveEnvironment()
        env.seed = seed
        env.parameter = _spade_copy.deepcopy(parameter)
        _spade_random.seed(seed)
        try:
            env._generate()
        except Exception as exc:
            raise RuntimeError(
                f"RLVE's generator failed for {self.rlve_name} at difficulty {difficulty} "
                f"(parameters {parameter!r}, seed {seed}): {type(exc).__name__}: {exc}"
            ) from exc
        if env.parameter is None:
            raise RuntimeError(
                f"RLVE's generator gave no problem for {self.rlve_name} at difficulty "
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
        answer = _spade_last_boxed(action)
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
            raise RuntimeError(f"{self.rlve_name} keeps no reference answer")
        return "\\boxed{" + str(self._answer) + "}"

    def close(self):
        self._env = None
        self._answer = None
# --- end of spade's adapter for an RLVE environment -------------------------------------------
