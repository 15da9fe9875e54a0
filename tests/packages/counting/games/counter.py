import random

from . import GAME_NAME, rules
from scoring import reward_for


class Counter:
    """Guess the hidden count; the observation says higher or lower."""

    def __init__(self, max_turns=None):
        self.max_turns = max_turns or 5

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.target = rng.randint(rules.TARGET_MIN, rules.TARGET_MAX)
        self.turns = 0
        return f"{GAME_NAME}: guess a number from {rules.TARGET_MIN} to {rules.TARGET_MAX}", {"module": __name__}

    def step(self, action):
        self.turns += 1
        guess = rules.parse(action)
        if guess == self.target:
            return "right", reward_for(True), True, False, {}
        hint = "invalid" if guess is None else ("higher" if guess < self.target else "lower")
        return hint, reward_for(False), False, self.turns >= self.max_turns, {}

    def solution(self):
        return f"\\boxed{{{self.target}}}"

    def close(self):
        pass
