class ChattySolutionEnv:
    """Single answer: reverse a number. solution() prints a large debug dump first, past the
    host's output cap (output_truncated)."""

    def __init__(self, max_turns=3):
        self.max_turns = max_turns
        self.turn_count = 0

    def reset(self, seed=None):
        self.n = random.Random(seed).randint(1000, 9999)
        self.turn_count = 0
        return f"Write the digits of {self.n} in reverse order, as \\boxed{{digits}}.", {}

    def step(self, action):
        self.turn_count += 1
        if f"\\boxed{{{str(self.n)[::-1]}}}" in action:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, False, self.turn_count >= self.max_turns, {}

    def solution(self):
        print("debug: " + "state " * 400_000)
        return str(self.n)[::-1]
