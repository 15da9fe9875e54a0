class EchoWordEnv:
    """Planted weakness: the answer is the only word of the observation, so playing words taken
    from the observation wins most episodes (random play wins), while garbage never does."""

    WORDS = ["amber", "birch", "coral", "delta", "ember", "frost", "grove", "haven", "ivory", "jade",
             "karma", "lotus", "maple", "nexus", "onyx", "pearl", "quartz", "raven", "sable", "topaz"]

    def __init__(self, max_turns=10):
        self.max_turns = max_turns
        self.turn_count = 0

    def reset(self, seed=None):
        self.word = random.Random(seed).choice(self.WORDS)
        self.turn_count = 0
        return self.word, {}

    def step(self, action):
        self.turn_count += 1
        if f"\\boxed{{{self.word}}}" in action:
            return "Correct!", 1.0, True, False, {}
        return self.word, 0.0, False, self.turn_count >= self.max_turns, {}

    def solution(self):
        return self.word
