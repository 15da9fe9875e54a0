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


class NextNumberEnv:
    """Single answer with a second try: the number that comes after n (lenient parsing).

    Difficulty d draws n from 1 to 20 * 10**d (20 at 0), at most 20 * 10**7.
    """

    def __init__(self, max_turns=2):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None, difficulty=0):
        top = 20 * 10 ** min(level(difficulty), 7)
        if seed is not None:
            random.seed(seed)
        self.n = random.randint(1, top)
        self.turn_count = 0
        obs = f"Count up: what number comes right after {self.n}? Answer as \\boxed{{n}}."
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        guess = first_number(action)
        if guess == self.n + 1:
            return "Correct!", 1.0, True, False, {"guess": guess}
        truncated = self.turn_count >= self.max_turns
        return f"No. What comes right after {self.n}?", 0.0, False, truncated, {"guess": guess}

    def solution(self):
        return f"\\boxed{{{self.n + 1}}}"
