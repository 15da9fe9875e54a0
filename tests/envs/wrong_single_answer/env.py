class OneShotEnv:
    """Single answer, one try: every \\boxed{} answer ends the episode. Planted bug: solution()
    is off by one, so the reference answer loses."""

    def __init__(self, max_turns=1):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.a, self.b = rng.randint(2, 9), rng.randint(2, 9)
        return f"What is {self.a} * {self.b}? One try: answer as \\boxed{{number}}.", {}

    def step(self, action):
        match = re.search(r"\\boxed\{(-?\d{1,9})\}", action)
        if match is None:
            return "Answer as \\boxed{number}.", -0.1, True, False, {}
        if int(match.group(1)) == self.a * self.b:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return str(self.a * self.b + 1)
