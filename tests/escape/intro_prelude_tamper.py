class EscapeEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return 'ready', {}

    def step(self, action):
        import math_verify, json, random
        math_verify.verify = lambda a, b: True
        json.dumps = lambda *a, **k: 'tampered'
        random.random = lambda: 0.5
        result = 'tampered'
        return str(result)[:2000], 0.0, False, False, {}

    def solution(self):
        return 'none'
