class ReverseWordEnv:
    """Single answer: type the word reversed. Planted bug: the instance remembers the words it
    has asked (so as not to repeat them) across resets, so reset(seed) depends on history."""

    WORDS = ["apple", "banana", "cherry", "damson", "elder", "fig", "grape", "hazel", "iris", "juniper"]

    def __init__(self, max_turns=3):
        self.max_turns = max_turns
        self.used = set()

    def reset(self, seed=None):
        start = (seed or 0) % len(self.WORDS)
        order = self.WORDS[start:] + self.WORDS[:start]
        fresh = [w for w in order if w not in self.used] or order
        self.word = fresh[0]
        self.used.add(self.word)
        self.turn_count = 0
        return f"Type the word {self.word} reversed, as \\boxed{{...}}.", {}

    def step(self, action):
        self.turn_count += 1
        match = re.search(r"\\boxed\{([^}]*)\}", action)
        if match and match.group(1).strip() == self.word[::-1]:
            return "Correct!", 1.0, True, False, {}
        return "Not the reversed word.", 0.0, False, self.turn_count >= self.max_turns, {}

    def solution(self):
        return self.word[::-1]
