class EscapeEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return 'ready', {}

    def step(self, action):
        class Evil:
            def __repr__(self):
                raise RuntimeError('boom in __repr__')
            __str__ = __repr__
        return 'ok', 0.0, False, False, {'x': Evil()}

    def solution(self):
        return 'none'
