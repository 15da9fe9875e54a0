import time

WEEK = 7 * 24 * 3600


class EscapeEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return 'ready', {}

    def step(self, action):
        before = time.monotonic()
        time.sleep(WEEK)
        slept = time.monotonic() - before
        return f'slept {slept:.3f}s', 0.0, False, False, {}

    def solution(self):
        return 'none'
