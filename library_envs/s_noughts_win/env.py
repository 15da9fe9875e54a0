import random
import re


class NoughtsWinEnv:
    """Single answer: the one square where X wins noughts and crosses at once."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        lines = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]
        wins = []
        while len(wins) != 1:
            n = random.randint(2, 4)
            cells = random.sample(range(9), 2 * n)
            self.board = ["-"] * 9
            for i, c in enumerate(cells):
                self.board[c] = "X" if i < n else "O"
            if any(all(self.board[i] == p for i in line) for line in lines for p in "XO"):
                continue
            wins = [c for c in range(9) if self.board[c] == "-"
                    and any(c in line and all(self.board[i] == "X" or i == c for i in line)
                            for line in lines)]
        self.answer = wins[0] + 1
        self.turn_count = 0
        rows = " / ".join(" ".join(self.board[r * 3:r * 3 + 3]) for r in range(3))
        obs = (
            "Noughts and crosses board, rows from top to bottom (- is empty): " + rows
            + ". Squares are numbered 1-9 row by row from the top left. X moves next. "
            "On which square does X complete a line of three? Answer as \\boxed{n}."
        )
        return obs, {"board": "".join(self.board)}

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
