class EscapeEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return 'ready', {}

    def step(self, action):
        # 200,000 entries of about 20 bytes each: the JSON is about 4 MB.
        return 'ok', 0.0, False, False, {f'key{i:08d}': i for i in range(200000)}

    def solution(self):
        return 'none'
