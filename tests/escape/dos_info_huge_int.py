class EscapeEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return 'ready', {}

    def step(self, action):
        # An int of 8,000,001 bits (2.4 million digits) costs nothing to build; converting it
        # to decimal for the info's JSON would cost seconds of fuel.
        return 'ok', 0.0, False, False, {'big': 1 << 8_000_000}

    def solution(self):
        return 'none'
