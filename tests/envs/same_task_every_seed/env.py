class FixedQuestionEnv:
    """Planted weakness: reset ignores its seed, so every episode is the same task."""

    def __init__(self, max_turns=3):
        self.max_turns = max_turns
        self.turn_count = 0

    def reset(self, seed=None):
        self.turn_count = 0
        return "What is 6 * 7? Answer as \\boxed{number}.", {}

    def step(self, action):
        self.turn_count += 1
        if "\\boxed{42}" in action:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, False, self.turn_count >= self.max_turns, {}

    def solution(self):
        return "42"
