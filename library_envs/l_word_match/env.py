import random
import re

WORDS = ["cart", "card", "care", "core", "bore", "bare", "barn", "corn",
         "cord", "word", "ward", "warm", "worm", "form", "farm", "harm"]


class WordMatchEnv:
    """Multi-turn: deduce a secret word from how many letters sit in place."""

    def __init__(self, max_turns=5, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.options = sorted(random.sample(WORDS, 8))
        self.secret = random.choice(self.options)
        self.turn_count = 0
        obs = (
            "The secret word is one of: " + ", ".join(self.options) + ". "
            "Guess one as \\boxed{word}; I will say how many of its letters "
            "are in the same position as in the secret word. You have "
            + str(self.max_turns) + " guesses."
        )
        return obs, {"options": self.options}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Guess inside \\boxed{}.", -0.1, False, truncated, {}
        guess = m.group(1).strip().lower()
        if guess not in self.options:
            return "Guess one of the listed words.", 0.0, False, truncated, {}
        if guess == self.secret:
            return "Correct!", 1.0, True, False, {}
        hits = sum(a == b for a, b in zip(guess, self.secret))
        msg = guess + ": " + str(hits) + " letter(s) in the right place."
        return msg, 0.05 * hits, False, truncated, {"hits": hits}

    def solution(self):
        return self.secret
