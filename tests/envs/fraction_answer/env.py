import random
from math_verify import parse, verify


def verify_answer(given, expected):
    if given.strip() == expected.strip():
        return True
    try:
        return verify(parse(expected), parse(given))
    except Exception:
        return False


class FractionSumEnv:
    """Single answer checked for mathematical equivalence (fractions, decimals, LaTeX)."""

    def __init__(self, max_turns=4):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        random.seed(seed)
        self.p, self.q = random.randint(1, 9), random.choice([2, 4, 5, 8])
        self.r, self.s = random.randint(1, 9), random.choice([2, 4, 5, 8])
        from fractions import Fraction
        total = Fraction(self.p, self.q) + Fraction(self.r, self.s)
        self.answer = f"{total.numerator}/{total.denominator}"
        self.turn_count = 0
        return f"What is {self.p}/{self.q} + {self.r}/{self.s}? Answer in \\boxed{{}}.", {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+)\}", action)
        if not m:
            return "Use \\boxed{}.", -0.1, False, truncated, {}
        if verify_answer(m.group(1), self.answer):
            return "Correct!", 1, True, False, {"answer": self.answer}
        return "Incorrect.", 0, False, truncated, {}

    def solution(self):
        return self.answer
