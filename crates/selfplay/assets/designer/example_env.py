import random
import re


def boxed(text):
    """The content of the last \\boxed{...} in `text`, stripped, or None."""
    found = re.findall(r"\\boxed\{([^{}]*)\}", text)
    return found[-1].strip() if found else None


class StackSortEnv:
    """Multi-turn: sort a row of numbered crates by swapping neighbours.

    The agent sees the row and answers one swap per turn as \\boxed{i}, which swaps the
    crates at positions i and i + 1 (counted from 1). Each swap that puts a smaller crate
    first earns a little; a sorted row wins.
    """

    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.size = 4
        self.row = list(range(1, self.size + 1))
        while self.row == sorted(self.row):
            random.shuffle(self.row)
        self.turn_count = 0
        obs = (
            f"Crates in a row: {self.show()}. Sort them from smallest to largest. "
            f"Each turn, swap two neighbours by answering \\boxed{{i}} to swap positions "
            f"i and i+1 (1 to {self.size - 1}). You have {self.max_turns} swaps."
        )
        return obs, {"row": list(self.row)}

    def show(self):
        return " ".join(str(c) for c in self.row)

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        move = boxed(action)
        if move is None or not move.isdigit() or len(move) > 2 or not 1 <= int(move) < self.size:
            obs = f"Answer \\boxed{{i}} with i from 1 to {self.size - 1}. Row: {self.show()}."
            return obs, -0.1, False, truncated, {"row": list(self.row)}
        i = int(move) - 1
        better = self.row[i] > self.row[i + 1]
        self.row[i], self.row[i + 1] = self.row[i + 1], self.row[i]
        if self.row == sorted(self.row):
            return f"Sorted: {self.show()}.", 1.0, True, False, {"row": list(self.row)}
        reward = 0.1 if better else 0.0
        obs = f"Row: {self.show()}. Swap again."
        return obs, reward, False, truncated, {"row": list(self.row)}

    def solution(self):
        """The swaps that sort the row (bubble sort), one \\boxed{i} per turn."""
        row = list(self.row)
        moves = []
        for end in range(len(row) - 1, 0, -1):
            for i in range(end):
                if row[i] > row[i + 1]:
                    row[i], row[i + 1] = row[i + 1], row[i]
                    moves.append(f"\\boxed{{{i + 1}}}")
        return "\n".join(moves)
