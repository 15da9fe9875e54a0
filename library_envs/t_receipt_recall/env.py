import random
import re


class ReceiptRecallEnv:
    """Single answer: recall what one item cost on a shown shopping receipt."""

    ITEMS = ["bread", "milk", "apples", "coffee", "rice", "soap", "cheese", "tea", "jam"]

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        items = random.sample(self.ITEMS, random.randint(5, 8))
        cents = random.sample(range(99, 1200), len(items))
        self.prices = {i: "%d.%02d" % (c // 100, c % 100) for i, c in zip(items, cents)}
        self.item = random.choice(items)
        self.turn_count = 0
        lines = [i.ljust(8) + " $" + self.prices[i] for i in items]
        obs = (
            "Receipt:\n" + "\n".join(lines) + "\nHow much did the " + self.item
            + " cost? Answer in dollars inside \\boxed{}, like \\boxed{2.49}."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*\$?(\d+(?:\.\d+)?)\s*\}", action)
        if not m:
            return "Answer a price inside \\boxed{}.", -0.1, False, truncated, {}
        if abs(float(m.group(1)) - float(self.prices[self.item])) < 0.005:
            return "Correct!", 1.0, True, False, {}
        return "Wrong, it was " + self.prices[self.item] + ".", 0.0, True, False, {}

    def solution(self):
        return self.prices[self.item]
