import random
import re

ITEMS = ["bread", "butter", "beans", "bananas", "milk", "mints", "melon",
         "mustard", "tea", "tomatoes", "tuna", "rice", "raisins", "apples"]


class ListSortEnv:
    """Multi-turn: read out a shopping list in alphabetical order, one item per turn."""

    def __init__(self, max_turns=8, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.items = random.sample(ITEMS, 5)
        self.left = sorted(self.items)
        self.turn_count = 0
        obs = (
            "Shopping list: " + ", ".join(self.items) + ". Say the items in "
            "alphabetical order, one per turn, as \\boxed{item}. You have "
            + str(self.max_turns) + " turns."
        )
        return obs, {"items": self.items}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Name an item as \\boxed{item}.", -0.1, False, truncated, {}
        item = m.group(1).strip().lower()
        if item != self.left[0]:
            return "That is not the next item.", 0.0, False, truncated, {}
        self.left.pop(0)
        if not self.left:
            return "All in order!", 1.0, True, False, {}
        return "Yes, " + item + ". Next?", 0.1, False, truncated, {}

    def solution(self):
        return " ".join("\\boxed{" + i + "}" for i in self.left)
