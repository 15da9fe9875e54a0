class BonusEnv:
    """Planted bug: a wrong answer scores 100 points, far outside the [-10, 10] the reference
    validation allows."""

    def __init__(self, max_turns=3):
        self.max_turns = max_turns
        self.turn_count = 0

    def reset(self, seed=None):
        self.answer = random.Random(seed).randint(10, 99)
        self.turn_count = 0
        return f"Type {self.answer} as \\boxed{{number}}.", {}

    def step(self, action):
        self.turn_count += 1
        if f"\\boxed{{{self.answer}}}" in action:
            return "Correct!", 1.0, True, False, {}
        return "Wrong, have some points anyway.", 100.0, False, self.turn_count >= self.max_turns, {}

    def solution(self):
        return str(self.answer)
