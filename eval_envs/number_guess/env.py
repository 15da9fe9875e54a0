import random
import re


class NumberGuessEnv:
    """Multi-turn: find a hidden number from 1 to 64 with higher/lower feedback."""

    def __init__(self, max_turns=8, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.secret = random.randint(1, 64)
        self.low, self.high = 1, 64
        self.turn_count = 0
        obs = (
            "I am thinking of a whole number from 1 to 64. Each turn, guess it as \\boxed{n}; "
            f"I will say higher or lower. You have {self.max_turns} guesses."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Guess inside \\boxed{}.", -0.1, False, truncated, {}
        try:
            guess = int(m.group(1).strip())
        except ValueError:
            return "Guesses are whole numbers.", 0.0, False, truncated, {}
        if guess == self.secret:
            return "Correct!", 1.0, True, False, {}
        if guess < self.secret:
            self.low = max(self.low, guess + 1)
            msg = "Higher."
        else:
            self.high = min(self.high, guess - 1)
            msg = "Lower."
        progress = 1.0 - (self.high - self.low) / 63.0
        return f"{msg} The number is between {self.low} and {self.high}.", 0.1 * progress, False, truncated, {}

    def solution(self):
        return str(self.secret)
