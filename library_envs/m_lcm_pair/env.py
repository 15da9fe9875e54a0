import math
import random
import re


class LcmPairEnv:
    """Single answer: the least common multiple of two numbers."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        k = random.randint(2, 12)
        x, y = random.sample(range(2, 16), 2)
        self.a, self.b = k * x, k * y
        self.answer = self.a * self.b // math.gcd(self.a, self.b)
        self.turn_count = 0
        obs = (
            "What is the least common multiple of " + str(self.a) + " and "
            + str(self.b) + "? Answer with the number inside \\boxed{}."
        )
        return obs, {"a": self.a, "b": self.b}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        try:
            value = int(m.group(1).strip())
        except ValueError:
            return "The answer must be an integer.", 0.0, False, truncated, {}
        if value == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return str(self.answer)
