import random
import re


class ListInitialsEnv:
    """Single answer: read the word spelled by the first letters of a shopping list."""

    WORDS = ["chest", "plant", "globe", "storm", "trail", "brave", "mount", "dream",
             "crisp", "spear", "bloom", "grain"]
    ITEMS = {"a": "apples", "b": "bread", "c": "cheese", "d": "dates", "e": "eggs",
             "g": "grapes", "h": "honey", "i": "ice cream", "l": "lemons", "m": "milk",
             "n": "nuts", "o": "oats", "p": "pears", "r": "rice", "s": "salt",
             "t": "tea", "u": "udon", "v": "vinegar"}

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.answer = random.choice(self.WORDS)
        items = [self.ITEMS[c] for c in self.answer]
        self.turn_count = 0
        obs = (
            "A shopping list reads, top to bottom: " + ", ".join(items) + ". "
            "The first letters of the items spell a word. Which word? "
            "Answer with the word inside \\boxed{}."
        )
        return obs, {"items": items}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().lower() == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong. The word was " + self.answer + ".", 0.0, True, False, {}

    def solution(self):
        return self.answer
