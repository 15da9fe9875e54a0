import random
import re


class BookSwapsEnv:
    """Multi-turn: put a shelf of numbered volumes in order with the fewest neighbour swaps."""

    def __init__(self, max_turns=10, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        n = random.randint(4, 6)
        self.books = list(range(1, n + 1))
        while not 3 <= self._left() <= self.max_turns:
            random.shuffle(self.books)
        self.limit = self._left()
        self.turn_count = 0
        rules = (
            "Volumes stand on a shelf in a muddle. \\boxed{i} swaps the books in places i and "
            "i+1 (places count from 1 on the left). Put them in order 1, 2, 3, ... from the "
            "left using at most " + str(self.limit) + " swaps."
        )
        return self._show(rules), {}

    def _show(self, msg):
        return msg + " Shelf: " + " ".join(str(b) for b in self.books)

    def _left(self):
        b = self.books
        return sum(b[i] > b[j] for i in range(len(b)) for j in range(i + 1, len(b)))

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.limit
        m = re.search(r"\\boxed\{\s*(\d{1,2})\s*\}", action)
        if not m:
            return self._show("Use \\boxed{i}."), -0.1, False, truncated, {}
        i = int(m.group(1)) - 1
        if not 0 <= i < len(self.books) - 1:
            return self._show("No such place."), 0.0, False, truncated, {}
        self.books[i], self.books[i + 1] = self.books[i + 1], self.books[i]
        if self._left() == 0:
            return self._show("Sorted!"), 1.0, True, False, {}
        return self._show("Swapped."), 0.05 / (1 + self._left()), False, truncated, {}

    def solution(self):
        b, moves = list(self.books), []
        while b != sorted(b):
            i = next(k for k in range(len(b) - 1) if b[k] > b[k + 1])
            b[i], b[i + 1] = b[i + 1], b[i]
            moves.append("\\boxed{" + str(i + 1) + "}")
        return " ".join(moves)
