import random
import re


class MagicSquareEnv:
    """Single answer: the missing number of a 3x3 magic square."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        grid = [[2, 7, 6], [9, 5, 1], [4, 3, 8]]
        for _ in range(random.randint(0, 3)):
            grid = [list(row) for row in zip(*grid[::-1])]
        if random.random() < 0.5:
            grid = [row[::-1] for row in grid]
        base, step = random.randint(0, 20), random.randint(1, 6)
        grid = [[base + step * v for v in row] for row in grid]
        r, c = random.randint(0, 2), random.randint(0, 2)
        self.answer = grid[r][c]
        grid[r][c] = "?"
        self.turn_count = 0
        obs = (
            "In this magic square every row, column and diagonal has the same sum: "
            + " / ".join(" ".join(str(v) for v in row) for row in grid)
            + ". What number goes where the ? is? Answer inside \\boxed{}."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        try:
            value = int(m.group(1).strip())
        except ValueError:
            return "The answer must be an integer.", 0.0, False, truncated, {}
        if value == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return str(self.answer)
