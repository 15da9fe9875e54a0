class PrintFloodEnv:
    """Prints megabytes on every step; the host keeps a bounded head of it."""

    def __init__(self, max_turns=3):
        self.max_turns = max_turns
        self.turn_count = 0

    def reset(self, seed=None):
        self.turn_count = 0
        print("reset called")
        return "flood ahead", {}

    def step(self, action):
        self.turn_count += 1
        line = "spam " * 200
        for _ in range(5000):
            print(line)
        return "flooded", 0.0, False, self.turn_count >= self.max_turns, {"lines": 5000}

    def solution(self):
        return "none"
