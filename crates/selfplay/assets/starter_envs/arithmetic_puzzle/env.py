import random
import re


class ArithmeticPuzzleEnv:
    """Single-answer puzzle: evaluate an expression, answer in \\boxed{}."""

    def __init__(self, max_turns=3):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.a = random.randint(2, 99)
        self.b = random.randint(2, 99)
        self.c = random.randint(1, 999)
        self.answer = self.a * self.b + self.c
        self.turn_count = 0
        obs = (
            f"Compute {self.a} * {self.b} + {self.c}. "
            "Give your final answer as \\boxed{number}. You have "
            f"{self.max_turns} attempts."
        )
        return obs, {"a": self.a, "b": self.b, "c": self.c}

    def step(self, action):
        self.turn_count += 1
        match = re.search(r"\\boxed\{(.+?)\}", action)
        truncated = self.turn_count >= self.max_turns
        if not match:
            return "Please answer in the form \\boxed{number}.", -0.1, False, truncated, {"valid": False}
        try:
            value = int(match.group(1).strip())
        except ValueError:
            return f"'{match.group(1)}' is not an integer.", 0.0, False, truncated, {"valid": False}
        if value == self.answer:
            return "Correct!", 1.0, True, False, {"valid": True}
        hint = "higher" if value < self.answer else "lower"
        return f"Wrong: the answer is {hint}.", 0.0, False, truncated, {"valid": True}

    def solution(self):
        return str(self.answer)
