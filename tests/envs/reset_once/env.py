class DeckEnv:
    """Planted bug: every reset deals the next task from a deck built once in __init__, so the
    third reset of an instance (the constructor's, reset(seed=42), reset(seed=123)) fails."""

    def __init__(self, max_turns=3):
        self.max_turns = max_turns
        self.deck = [12, 7]
        self.reset()

    def reset(self, seed=None):
        self.answer = self.deck.pop()
        self.turn_count = 0
        return f"Type {self.answer} as \\boxed{{number}}.", {}

    def step(self, action):
        self.turn_count += 1
        if f"\\boxed{{{self.answer}}}" in action:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, False, self.turn_count >= self.max_turns, {}

    def solution(self):
        return str(self.answer)
