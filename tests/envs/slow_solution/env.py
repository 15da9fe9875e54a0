class SlowSolutionEnv:
    """Single answer: the sum of the primes below N. solution() finds it by trial division, slow
    enough to use a large share of a call's fuel budget (fuel_high)."""

    def __init__(self, max_turns=3):
        self.max_turns = max_turns
        self.turn_count = 0

    def reset(self, seed=None):
        self.n = random.Random(seed).randint(20, 60)
        self.turn_count = 0
        return f"What is the sum of the primes below {self.n}? Answer as \\boxed{{number}}.", {}

    def step(self, action):
        self.turn_count += 1
        if f"\\boxed{{{self._answer(self.n)}}}" in action:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, False, self.turn_count >= self.max_turns, {}

    @staticmethod
    def _answer(n):
        return sum(p for p in range(2, n) if all(p % d for d in range(2, p)))

    def solution(self):
        # The same answer, the slow way: count up to a large bound first.
        total = 0
        for i in range(SLOW_LOOP):
            total += i & 1
        return str(self._answer(self.n) + total - total)


SLOW_LOOP = 50_000
