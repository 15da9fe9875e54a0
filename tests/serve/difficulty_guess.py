"""A guessing game whose `reset` takes a difficulty (the number is from 1 to 10**difficulty)
and a keyword-only label, for the serve tests of extra reset fields: OpenEnv passes the fields
a `reset` takes and drops the others."""

import random


class DifficultyGuessEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns
        self.difficulty = 1
        self.target = 0
        self.turns = 0

    def reset(self, seed=None, difficulty=1, *, label="plain"):
        rng = random.Random(seed)
        self.difficulty = int(difficulty)
        self.target = rng.randint(1, 10 ** self.difficulty)
        self.turns = 0
        top = 10 ** self.difficulty
        return (
            f"Guess a number from 1 to {top} ({label}). Answer in \\boxed{{}}.",
            {"difficulty": self.difficulty, "label": label},
        )

    def step(self, action):
        self.turns += 1
        if action.strip() == f"\\boxed{{{self.target}}}":
            return "Correct.", 1.0, True, False, {"turns": self.turns}
        return "Wrong.", 0.0, False, self.turns >= self.max_turns, {"turns": self.turns}

    def solution(self):
        return f"\\boxed{{{self.target}}}"

    def close(self):
        pass
