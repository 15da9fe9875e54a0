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


class GuessThreeEnv:
    """Multi-turn: find a number from 1 to 3 in three guesses; a repeated guess is wasted.

    Difficulty d hides the number among 1 to 3 + d; the guesses stay `max_turns`.
    """

    def __init__(self, max_turns=3):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None, difficulty=0):
        top = 3 + level(difficulty)
        if seed is not None:
            random.seed(seed)
        self.secret = random.randint(1, top)
        self.turn_count = 0
        self.tried = []
        among = "1, 2 or 3" if top == 3 else f"a whole number from 1 to {top}"
        obs = (
            f"I am thinking of {among}. Guess it as \\boxed{{n}}; if you are wrong, guess again. "
            f"You have {self.max_turns} guesses."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        guess = first_number(action)
        if guess == self.secret:
            return "Correct!", 1.0, True, False, {"guess": guess}
        if guess is not None:
            self.tried.append(guess)
        truncated = self.turn_count >= self.max_turns
        tried = ", ".join(str(t) for t in self.tried) or "nothing valid"
        return f"No. You have tried {tried}. Guess again.", 0.0, False, truncated, {"guess": guess}

    def solution(self):
        return f"\\boxed{{{self.secret}}}"
