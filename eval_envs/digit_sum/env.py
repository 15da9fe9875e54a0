import random
import re


class DigitSumEnv:
    """Single answer: the sum of the digits of a number."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.number = random.randint(1000, 999999)
        self.answer = sum(int(d) for d in str(self.number))
        self.turn_count = 0
        obs = (
            f"What is the sum of the digits of {self.number}? "
            "Answer with the number inside \\boxed{}."
        )
        return obs, {"number": self.number}

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
