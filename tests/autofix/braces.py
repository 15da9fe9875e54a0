"""A single-answer sum whose prompt writes literal braces in an f-string: `\\boxed{}` (an
empty field) and `\\boxed{your answer}` (words in a field). Both are a SyntaxError; the
automatic fixes double the braces, and the fixed env passes `spade check`."""


class SumEnv:
    def __init__(self, max_turns=1):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.a, self.b = rng.randint(1, 50), rng.randint(1, 50)
        return f"What is {self.a} + {self.b}? Reply as \\boxed{}, like \\boxed{your answer}.", {}

    def step(self, action):
        match = re.search(r"\\boxed\{(-?\d{1,6})\}", action)
        if match and int(match.group(1)) == self.a + self.b:
            return "Correct!", 1.0, True, False, {}
        return f"Wrong: the sum is {self.a + self.b}.", 0.0, True, False, {}

    def solution(self):
        return f"\\boxed{{{self.a + self.b}}}"
