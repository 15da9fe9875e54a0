class FaultyEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        return "ok", 1.0, True, {}

    def solution(self):
        return "none"
