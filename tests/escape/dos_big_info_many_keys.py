class EscapeEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return 'ready', {}

    def step(self, action):
        # 20,000 small entries of about 110 bytes each, with characters JSON escapes (a newline
        # and a quote): the JSON is about 2.2 MB.
        return 'ok', 0.0, False, False, {i: 'v' * 98 + '\n"' for i in range(20000)}

    def solution(self):
        return 'none'
