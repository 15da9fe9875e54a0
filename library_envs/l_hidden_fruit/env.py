import random
import re

FRUITS = ["apple", "pear", "plum", "lime", "kiwi", "mango", "grape",
          "lemon", "peach", "melon", "fig", "date", "cherry", "guava"]


class HiddenFruitEnv:
    """Single answer: find the one fruit name hidden in a row of letters."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        letters = "bcdfghjklmnpqrstvwxyzaeiou"
        while True:
            self.answer = random.choice(FRUITS)
            left = "".join(random.choice(letters) for _ in range(random.randint(2, 6)))
            right = "".join(random.choice(letters) for _ in range(8 - len(left)))
            row = left + self.answer + right
            if sum(f in row for f in FRUITS) == 1:
                break
        self.turn_count = 0
        obs = (
            "Exactly one of these fruit names is hidden, spelled left to right "
            "without gaps, in the letters " + row.upper() + ": "
            + ", ".join(FRUITS) + ". Which fruit is it? Answer inside \\boxed{}."
        )
        return obs, {"row": row}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().lower() == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong. It was " + self.answer + ".", 0.0, True, False, {}

    def solution(self):
        return self.answer
