"""A single-answer fraction sum that uses `fractions.Fraction` without importing `fractions`
(the sandbox's loader does not provide it): a NameError at reset. The automatic fixes add
`import fractions` after this docstring, and the fixed env passes `spade check`."""


class FractionSumEnv:
    def __init__(self, max_turns=1):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.x = fractions.Fraction(rng.randint(1, 9), rng.randint(2, 9))
        self.y = fractions.Fraction(rng.randint(1, 9), rng.randint(2, 9))
        return f"What is {self.x} + {self.y}? Reply as \\boxed{{p/q}} in lowest terms.", {}

    def step(self, action):
        match = re.search(r"\\boxed\{\s*(-?\d{1,6})\s*(?:/\s*([1-9]\d{0,5}))?\s*\}", action)
        if match:
            value = fractions.Fraction(int(match.group(1)), int(match.group(2) or 1))
            if value == self.x + self.y:
                return "Correct!", 1.0, True, False, {}
        return f"Wrong: the sum is {self.x + self.y}.", 0.0, True, False, {}

    def solution(self):
        return f"\\boxed{{{self.x + self.y}}}"
