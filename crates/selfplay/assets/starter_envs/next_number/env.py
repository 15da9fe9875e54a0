import random
import re


def first_number(text):
    """The number inside the last \\boxed{}, else the first whole number (at most 9 digits)."""
    boxed = re.findall(r"\\boxed\{\s*(-?\d{1,9})\s*\}", text)
    if boxed:
        return int(boxed[-1])
    found = re.search(r"-?\d{1,9}", text)
    return int(found.group(0)) if found else None


class NextNumberEnv:
    """Single answer with a second try: the number that comes after n (lenient parsing)."""

    def __init__(self, max_turns=2):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.n = random.randint(1, 20)
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
