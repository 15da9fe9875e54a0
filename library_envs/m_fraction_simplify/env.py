import math
import random
import re


class FractionSimplifyEnv:
    """Single answer: reduce a fraction to lowest terms."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        q = random.randint(2, 20)
        p = random.choice([n for n in range(1, 3 * q) if math.gcd(n, q) == 1])
        k = random.randint(2, 15)
        self.p, self.q = p, q
        self.turn_count = 0
        obs = (
            "Simplify the fraction " + str(p * k) + "/" + str(q * k)
            + " to lowest terms. Answer as \\boxed{a/b}."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*(\d+)\s*/\s*(\d+)\s*\}", action)
        if not m:
            return "Answer as \\boxed{a/b} with whole numbers.", -0.1, False, truncated, {}
        a, b = int(m.group(1)), int(m.group(2))
        if (a, b) == (self.p, self.q):
            return "Correct!", 1.0, True, False, {}
        if b and a * self.q == b * self.p:
            return "Equal, but not in lowest terms.", 0.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return str(self.p) + "/" + str(self.q)
