import random
import re


class BaseToDecimalEnv:
    """Single answer: convert a number written in base 2-9 to base 10."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.base = random.randint(2, 9)
        self.answer = random.randint(self.base + 1, 500)
        digits, n = "", self.answer
        while n:
            digits = str(n % self.base) + digits
            n //= self.base
        self.digits = digits
        self.turn_count = 0
        obs = (
            "The number " + digits + " is written in base " + str(self.base)
            + ". What is it in base 10? Answer inside \\boxed{}."
        )
        return obs, {"base": self.base}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        try:
            value = int(m.group(1).strip())
        except ValueError:
            return "Give a base-10 integer.", 0.0, False, truncated, {}
        if value == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong. It was " + str(self.answer) + ".", 0.0, True, False, {}

    def solution(self):
        return str(self.answer)
