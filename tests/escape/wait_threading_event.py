import threading
import time


class EscapeEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return 'ready', {}

    def step(self, action):
        before = time.time()
        fired = threading.Event().wait(10 ** 6)
        waited = time.time() - before
        return f'fired={fired} waited {waited:.0f}s', 0.0, False, False, {}

    def solution(self):
        return 'none'
