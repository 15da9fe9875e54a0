class EscapeEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return 'ready', {}

    def step(self, action):
        class R(float):
            def __float__(self):
                raise RuntimeError('boom in __float__')
        return 'ok', R(1.0), False, False, {}

    def solution(self):
        return 'none'
