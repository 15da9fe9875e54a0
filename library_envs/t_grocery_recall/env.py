import random
import re


class GroceryRecallEnv:
    """Multi-turn: recall the quantities on a shown shopping list, one item per turn."""

    ITEMS = ["eggs", "lemons", "onions", "yogurts", "bagels", "carrots", "peaches"]

    def __init__(self, max_turns=8, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        items = random.sample(self.ITEMS, random.randint(4, 6))
        self.counts = {i: random.randint(1, 12) for i in items}
        self.order = random.sample(items, len(items))
        self.pos = 0
        self.turn_count = 0
        obs = (
            "Memorise this shopping list: "
            + ", ".join(str(self.counts[i]) + " " + i for i in items) + ". "
            "You will be asked for each quantity in turn; answer as \\boxed{n}. "
            "A wrong number ends the game. How many " + self.order[0] + "?"
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*(\d{1,6})\s*\}", action)
        if not m:
            return "Give a number as \\boxed{n}.", -0.1, False, truncated, {}
        item = self.order[self.pos]
        if int(m.group(1)) != self.counts[item]:
            return "Wrong, it was " + str(self.counts[item]) + ".", 0.0, True, False, {}
        self.pos += 1
        if self.pos == len(self.order):
            return "Whole list recalled!", 1.0, True, False, {}
        obs = "Right. How many " + self.order[self.pos] + "?"
        return obs, 0.1, False, truncated, {}

    def solution(self):
        return " ".join("\\boxed{" + str(self.counts[i]) + "}" for i in self.order)
