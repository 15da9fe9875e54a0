import random
import re

PAIRS = [("hot", "cold"), ("big", "small"), ("fast", "slow"), ("open", "closed"),
         ("early", "late"), ("full", "empty"), ("happy", "sad"), ("wet", "dry"),
         ("push", "pull"), ("buy", "sell"), ("rich", "poor"), ("loud", "quiet"),
         ("first", "last"), ("thick", "thin"), ("win", "lose"), ("up", "down")]


class OppositeWordEnv:
    """Single answer: pick the option that means the opposite of a word."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        pairs = random.sample(PAIRS, 4)
        self.word, self.answer = random.sample(pairs[0], 2)
        options = [self.answer] + [random.choice(p) for p in pairs[1:]]
        random.shuffle(options)
        self.turn_count = 0
        obs = (
            "Which option means the opposite of '" + self.word + "'? Options: "
            + ", ".join(options) + ". Answer with the word inside \\boxed{}."
        )
        return obs, {"options": options}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().lower() == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong. The opposite is " + self.answer + ".", 0.0, True, False, {}

    def solution(self):
        return self.answer
