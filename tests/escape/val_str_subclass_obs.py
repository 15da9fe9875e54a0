class EscapeEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return 'ready', {}

    def step(self, action):
        class Sneaky(str):
            def __str__(self):
                raise RuntimeError('boom in __str__')
        return Sneaky('obs'), 0.0, False, False, {}

    def solution(self):
        return 'none'
