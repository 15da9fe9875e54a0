import threading
import time


class EscapeEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return 'ready', {}

    def step(self, action):
        lock = threading.Lock()
        lock.acquire()
        before = time.time()
        got = lock.acquire(timeout=10 ** 6)
        waited = time.time() - before
        return f'got={got} waited {waited:.0f}s', 0.0, False, False, {}

    def solution(self):
        return 'none'
