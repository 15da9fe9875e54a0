class FaultyEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        chunks = []
        while True:
            chunks.append(bytearray(1 << 20))

    def solution(self):
        return "none"
