class FaultyEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        x = [0] * (10 ** 9)
        return "ok", 0.0, False, False, {}

    def solution(self):
        return "none"
