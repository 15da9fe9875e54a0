import random
import re

WORDS = ["education", "beautiful", "mountain", "elephant", "umbrella",
         "kangaroo", "adventure", "orchestra", "avocado", "octopus",
         "strawberry", "dinosaur", "audience", "sequoia", "rhythm"]


class VowelCountEnv:
    """Single answer: count the vowels in a short phrase."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.phrase = " ".join(random.sample(WORDS, 2))
        self.answer = sum(1 for c in self.phrase if c in "aeiou")
        self.turn_count = 0
        obs = (
            "How many vowels (a, e, i, o, u; y does not count) are in '"
            + self.phrase + "'? Answer with the number inside \\boxed{}."
        )
        return obs, {"phrase": self.phrase}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        try:
            value = int(m.group(1).strip())
        except ValueError:
            return "The answer must be a whole number.", 0.0, False, truncated, {}
        if value == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong. There are " + str(self.answer) + ".", 0.0, True, False, {}

    def solution(self):
        return str(self.answer)
