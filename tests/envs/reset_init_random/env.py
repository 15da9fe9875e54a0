class OffsetSumEnv:
    """Single answer: add two numbers. Planted bug: __init__ draws an offset from the unseeded
    module-global random, so reset(seed) gives a different task in every new instance."""

    def __init__(self, max_turns=3):
        self.max_turns = max_turns
        self.offset = random.randint(1, 10**9)

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.a = rng.randint(1, 99) + self.offset
        self.b = rng.randint(1, 99)
        self.turn_count = 0
        return f"What is {self.a} + {self.b}? Answer as \\boxed{{number}}.", {}

    def step(self, action):
        self.turn_count += 1
        match = re.search(r"\\boxed\{(-?\d{1,12})\}", action)
        if match and int(match.group(1)) == self.a + self.b:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, False, self.turn_count >= self.max_turns, {}

    def solution(self):
        return str(self.a + self.b)
