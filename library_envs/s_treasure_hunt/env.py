import random
import re


class TreasureHuntEnv:
    """Multi-turn: find a buried chest on a map grid from compass hints."""

    def __init__(self, max_turns=8, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.w, self.h = random.randint(5, 9), random.randint(5, 9)
        self.chest = (random.randint(1, self.w), random.randint(1, self.h))
        self.turn_count = 0
        obs = (
            "A chest is buried on a map; x runs 1-" + str(self.w) + " west to east, y runs 1-"
            + str(self.h) + " south to north. Each turn dig at \\boxed{x y}. If it is not there I say in which "
            "direction it lies from your hole (N, NE, E, SE, S, SW, W or NW; NE means both "
            "further north and further east). Find it within " + str(self.max_turns)
            + " digs."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*(\d{1,2})[\s,]+(\d{1,2})\s*\}", action)
        if not m:
            return "Dig with \\boxed{x y}.", -0.1, False, truncated, {}
        x, y = int(m.group(1)), int(m.group(2))
        if not (1 <= x <= self.w and 1 <= y <= self.h):
            return "That is off the map.", 0.0, False, truncated, {}
        cx, cy = self.chest
        if (x, y) == self.chest:
            return "You found the chest!", 1.0, True, False, {}
        hint = ("N" if cy > y else "S" if cy < y else "") + ("E" if cx > x else "W" if cx < x else "")
        obs = "Nothing at (" + str(x) + ", " + str(y) + "). The chest lies " + hint + "."
        return obs, 0.0, False, truncated, {"hint": hint}

    def solution(self):
        return "\\boxed{" + str(self.chest[0]) + " " + str(self.chest[1]) + "}"
