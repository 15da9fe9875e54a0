class SilentEnv:
    """Planted bug: reset returns an observation of whitespace only, so the agent sees no task."""

    def __init__(self, max_turns=3):
        self.max_turns = max_turns
        self.turn_count = 0

    def reset(self, seed=None):
        self.answer = random.Random(seed).randint(1, 9)
        self.turn_count = 0
        return "  \n", {}

    def step(self, action):
        self.turn_count += 1
        if f"\\boxed{{{self.answer}}}" in action:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, False, self.turn_count >= self.max_turns, {}

    def solution(self):
        return str(self.answer)
