import random
import re

WORDS = [("banana", "a fruit"), ("cherry", "a fruit"), ("tiger", "an animal"),
         ("rabbit", "an animal"), ("guitar", "an instrument"),
         ("violin", "an instrument"), ("carrot", "a vegetable"),
         ("potato", "a vegetable"), ("purple", "a colour"),
         ("pencil", "a school item"), ("ladder", "a tool"),
         ("castle", "a building")]


class LetterRevealEnv:
    """Multi-turn: uncover a hidden word of a known category letter by letter."""

    def __init__(self, max_turns=10, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.word, category = random.choice(WORDS)
        self.found = set()
        self.turn_count = 0
        obs = (
            "Guess the hidden word, which is " + category + ". Each turn guess "
            "one letter as \\boxed{e}, or the whole word as \\boxed{word}. "
            "You have " + str(self.max_turns) + " turns.\n" + self._board()
        )
        return obs, {}

    def _board(self):
        shown = [c if c in self.found else "_" for c in self.word]
        return "Word: " + " ".join(shown)

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Guess inside \\boxed{}.", -0.1, False, truncated, {}
        guess = m.group(1).strip().lower()
        if guess == self.word:
            return "Correct! The word is " + self.word + ".", 1.0, True, False, {}
        if len(guess) != 1 or guess not in self.word or guess in self.found:
            return "No new letter. " + self._board(), 0.0, False, truncated, {}
        self.found.add(guess)
        if self.found == set(self.word):
            return "Solved! The word is " + self.word + ".", 1.0, True, False, {}
        return "Yes! " + self._board(), 0.1, False, truncated, {}

    def solution(self):
        left = sorted(set(self.word) - self.found)
        if len(left) > self.max_turns - self.turn_count:
            return self.word
        return " ".join("\\boxed{" + c + "}" for c in left)
