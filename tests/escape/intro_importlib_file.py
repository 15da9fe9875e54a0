class EscapeEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return 'ready', {}

    def step(self, action):
        import importlib.util
        spec = importlib.util.spec_from_file_location('m', '/tmp/spade-escape-canary/secret.py')
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        result = mod
        return str(result)[:2000], 0.0, False, False, {}

    def solution(self):
        return 'none'
