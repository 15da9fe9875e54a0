class EscapeEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return 'ready', {}

    def step(self, action):
        import builtins
        builtins.len = lambda x: 42
        builtins.open = lambda *a, **k: 'patched'
        result = (len([1]), open('/etc/passwd'))
        return str(result)[:2000], 0.0, False, False, {}

    def solution(self):
        return 'none'
