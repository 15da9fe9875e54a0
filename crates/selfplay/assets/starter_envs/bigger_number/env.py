import random
import re


def first_number(text):
    """The number inside the last \\boxed{}, else the first whole number (at most 9 digits)."""
    boxed = re.findall(r"\\boxed\{\s*(-?\d{1,9})\s*\}", text)
    if boxed:
        return int(boxed[-1])
    found = re.search(r"-?\d{1,9}", text)
    return int(found.group(0)) if found else None


def level(difficulty):
    """The difficulty as a level from 0 (fixed-env training passes one; self-play passes none)."""
    if isinstance(difficulty, bool) or not isinstance(difficulty, int) or difficulty < 0:
        raise ValueError(f"difficulty must be an integer >= 0, not {difficulty!r}")
    return difficulty


class BiggerNumberEnv:
    """Single answer: name the bigger of two numbers (lenient parsing, one attempt).

    Difficulty d draws numbers of up to d + 1 digits (1 to 9 at 0), at most 9 digits.
    """

    def __init__(self, max_turns=1):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None, difficulty=0):
        digits = min(level(difficulty), 8) + 1
        if seed is not None:
            random.seed(seed)
        self.a, self.b = random.sample(range(1, 10**digits), 2)
        self.done = False
        obs = f"Which number is bigger, {self.a} or {self.b}? Answer with the bigger number as \\boxed{{n}}."
        return obs, {}

    def step(self, action):
        guess = first_number(action)
        win = guess == max(self.a, self.b)
        self.done = True
        obs = "Correct!" if win else f"No: {max(self.a, self.b)} is bigger."
        return obs, (1.0 if win else 0.0), True, False, {"guess": guess}

    def solution(self):
        return f"\\boxed{{{max(self.a, self.b)}}}"
