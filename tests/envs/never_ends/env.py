class EndlessCounterEnv:
    """Counts the actions it receives and never ends an episode: it ignores max_turns and has
    no winning move."""

    def __init__(self, max_turns=5):
        self.max_turns = max_turns
        self.count = 0

    def reset(self, seed=None):
        self.count = 0
        return f"Say anything. (seed {seed})", {}

    def step(self, action):
        self.count += 1
        return f"You have said {self.count} things.", 0.0, False, False, {"count": self.count}

    def solution(self):
        return "There is no solution: the game goes on forever."
