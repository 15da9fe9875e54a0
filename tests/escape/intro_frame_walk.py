class EscapeEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return 'ready', {}

    def step(self, action):
        import sys
        f = sys._getframe()
        names = []
        while f is not None:
            names.append(f.f_code.co_name)
            f.f_globals['__pwned__'] = True
            f = f.f_back
        result = names
        return str(result)[:2000], 0.0, False, False, {}

    def solution(self):
        return 'none'
