import random
import re


class PowerModEnv:
    """Single answer: the remainder of a large power divided by a small modulus."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.base = random.randint(2, 19)
        self.exp = random.randint(10, 99)
        self.mod = random.randint(3, 13)
        self.answer = pow(self.base, self.exp, self.mod)
        self.turn_count = 0
        obs = (
            "What is the remainder when " + str(self.base) + "^" + str(self.exp)
            + " is divided by " + str(self.mod) + "? Answer inside \\boxed{}."
        )
        return obs, {"modulus": self.mod}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        try:
            value = int(m.group(1).strip())
        except ValueError:
            return "The remainder is a whole number.", 0.0, False, truncated, {}
        if value == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return str(self.answer)
