import itertools
import random
import re


class LatinSquareEnv:
    """Multi-turn: fill a 3x3 grid so each row and column has A, B and C once."""

    def __init__(self, max_turns=10, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        rows = list(itertools.permutations("ABC"))
        squares = [g for g in itertools.product(rows, repeat=3)
                   if all(len(set(c)) == 3 for c in zip(*g))]
        self.sol = random.choice(squares)
        cells = [(r, c) for r in range(3) for c in range(3)]
        random.shuffle(cells)
        self.blank = []
        for cell in cells:
            trial = self.blank + [cell]
            fits = [g for g in squares if all(
                g[r][c] == self.sol[r][c] for r, c in cells if (r, c) not in trial)]
            if len(fits) == 1:
                self.blank = trial
        self.turn_count = 0
        obs = (
            "Fill the grid so every row and column holds A, B and C once. Each "
            "turn fill one blank as \\boxed{row col letter}, e.g. \\boxed{2 3 B} "
            "(rows and columns 1-3). You have " + str(self.max_turns) + " turns.\n"
            + self._grid()
        )
        return obs, {}

    def _grid(self):
        return "\n".join(" ".join("." if (r, c) in self.blank else self.sol[r][c]
                                  for c in range(3)) for r in range(3))

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*([1-3])\s+([1-3])\s+([ABCabc])\s*\}", action)
        if not m:
            return "Fill as \\boxed{row col letter}.", -0.1, False, truncated, {}
        r, c, x = int(m.group(1)) - 1, int(m.group(2)) - 1, m.group(3).upper()
        if (r, c) not in self.blank or self.sol[r][c] != x:
            return "That does not fit.\n" + self._grid(), 0.0, False, truncated, {}
        self.blank.remove((r, c))
        if not self.blank:
            return "Solved!\n" + self._grid(), 1.0, True, False, {}
        return "OK.\n" + self._grid(), 0.1, False, truncated, {}

    def solution(self):
        return " ".join("\\boxed{" + str(r + 1) + " " + str(c + 1) + " "
                        + self.sol[r][c] + "}" for r, c in self.blank)
