import random
import re


class TileRotateEnv:
    """Single answer: which letter lands on a cell after a square tile is rotated."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        letters = random.sample("ABCDEFGHJKLMNPRSTUWXYZ", 9)
        grid = [letters[0:3], letters[3:6], letters[6:9]]
        turn = random.choice(["90 degrees clockwise", "90 degrees counterclockwise", "180 degrees"])
        self.row, self.col = random.randint(1, 3), random.randint(1, 3)
        r, c = self.row - 1, self.col - 1
        if turn.endswith("counterclockwise"):
            self.answer = grid[c][2 - r]
        elif turn.endswith("clockwise"):
            self.answer = grid[2 - c][r]
        else:
            self.answer = grid[2 - r][2 - c]
        self.turn_count = 0
        rows = " / ".join(" ".join(line) for line in grid)
        obs = (
            "A square tile shows a 3x3 grid of letters, rows from top to bottom: " + rows
            + ". The tile is rotated " + turn + ". Which letter is now in row "
            + str(self.row) + ", column " + str(self.col)
            + " (counted from the top left)? Answer as \\boxed{X}."
        )
        return obs, {"turn": turn}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().upper() == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return self.answer
