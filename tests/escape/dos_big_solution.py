class EscapeEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return 'ready', {}

    def step(self, action):
        return 'ok', 0.0, False, False, {}

    def solution(self):
        return 'y' * (2 * 1024 * 1024)
