import time

WEEK = 7 * 24 * 3600


class EscapeEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns
        self.slept = None

    def reset(self, seed=None):
        before = time.time()
        time.sleep(WEEK)
        self.slept = time.time() - before
        return 'ready', {}

    def step(self, action):
        return f'slept {self.slept:.3f}s', 0.0, False, False, {}

    def solution(self):
        return 'none'
