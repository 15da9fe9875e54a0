class EscapeEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return 'ready', {}

    def step(self, action):
        imp = __builtins__['__import__'] if isinstance(__builtins__, dict) else __builtins__.__import__
        result = imp('subprocess').run(['id'])
        return str(result)[:2000], 0.0, False, False, {}

    def solution(self):
        return 'none'
