import random
import re


class KnightHopsEnv:
    """Single answer: the fewest moves a chess knight needs between two squares."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        cells = [(c, r) for c in range(8) for r in range(8)]
        self.start, self.end = random.sample(cells, 2)
        dist, queue = {self.start: 0}, [self.start]
        for c, r in queue:
            for dc, dr in [(1, 2), (2, 1), (2, -1), (1, -2), (-1, -2), (-2, -1), (-2, 1), (-1, 2)]:
                nxt = (c + dc, r + dr)
                if nxt in cells and nxt not in dist:
                    dist[nxt] = dist[(c, r)] + 1
                    queue.append(nxt)
        self.answer = dist[self.end]
        self.turn_count = 0
        obs = (
            "On an empty 8x8 chessboard (files a-h, ranks 1-8) a knight stands on "
            + self._name(self.start) + ". What is the fewest number of knight moves "
            "that bring it to " + self._name(self.end) + "? Answer as \\boxed{n}."
        )
        return obs, {"start": self._name(self.start), "end": self._name(self.end)}

    def _name(self, cell):
        return "abcdefgh"[cell[0]] + str(cell[1] + 1)

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        try:
            value = int(m.group(1).strip())
        except ValueError:
            return "The answer must be a whole number.", 0.0, False, truncated, {}
        if value == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return str(self.answer)
