import random
import re

SYMBOLS = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
           (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]


class RomanNumeralEnv:
    """Single answer: read a Roman numeral as an integer."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.answer = random.randint(1, 3999)
        n, self.numeral = self.answer, ""
        for value, letters in SYMBOLS:
            while n >= value:
                self.numeral += letters
                n -= value
        self.turn_count = 0
        obs = (
            "What integer does the Roman numeral " + self.numeral
            + " stand for? Answer inside \\boxed{}."
        )
        return obs, {"numeral": self.numeral}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        try:
            value = int(m.group(1).strip())
        except ValueError:
            return "Answer with digits, e.g. \\boxed{14}.", 0.0, False, truncated, {}
        if value == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return str(self.answer)
