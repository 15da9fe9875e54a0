"""A well-behaved guessing game whose reset does a few million operations of busy work, so that
`spade check` (which resets it many times) takes seconds. Used by the serve tests to show that
one slow check holds up neither the port nor other registrations."""

import random


class SlowCheckEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns
        self.target = 0
        self.turns = 0

    def reset(self, seed=None):
        rng = random.Random(seed)
        busy = 0
        for i in range(800_000):
            busy ^= i
        self.target = rng.randint(1, 9) + (busy & 0)
        self.turns = 0
        return "Guess a digit from 1 to 9. Answer in \\boxed{}.", {"turns_left": self.max_turns}

    def step(self, action):
        self.turns += 1
        if action.strip() == f"\\boxed{{{self.target}}}":
            return "Correct.", 1.0, True, False, {"turns": self.turns}
        return "Wrong.", 0.0, False, self.turns >= self.max_turns, {"turns": self.turns}

    def solution(self):
        return f"\\boxed{{{self.target}}}"

    def close(self):
        pass
