class EscapeEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return 'ready', {}

    def step(self, action):
        class Bomb:
            def __del__(self):
                raise RuntimeError('boom in __del__')
        for _ in range(100):
            Bomb()
        result = 'survived'
        return str(result)[:2000], 0.0, False, False, {}

    def solution(self):
        return 'none'
