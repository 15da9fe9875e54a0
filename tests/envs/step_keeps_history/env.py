class CountdownEnv:
    """Multi-turn: count down from N to 0, one \\boxed{number} per turn. Planted bug: the number
    of moves is kept across resets and shown after every move, so the same seed and actions give
    different step results once other episodes have been played."""

    def __init__(self, max_turns=12):
        self.max_turns = max_turns
        self.moves = 0

    def reset(self, seed=None):
        self.start = random.Random(seed).randint(4, 9)
        self.next = self.start
        self.turn_count = 0
        return f"Count down from {self.start} to 0: say each number as \\boxed{{n}}.", {}

    def step(self, action):
        self.turn_count += 1
        self.moves += 1
        truncated = self.turn_count >= self.max_turns
        match = re.search(r"\\boxed\{(-?\d{1,9})\}", action)
        if match and int(match.group(1)) == self.next:
            self.next -= 1
            if self.next < 0:
                return f"Done (move {self.moves}).", 1.0, True, False, {}
            return f"Good (move {self.moves}).", 0.1, False, truncated, {}
        return f"Say {self.next} (move {self.moves}).", 0.0, False, truncated, {}

    def solution(self):
        return " ".join(f"\\boxed{{{n}}}" for n in range(self.next, -1, -1))
