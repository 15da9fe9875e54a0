import random
import re


class FakeCoinEnv:
    """Multi-turn: find the one heavier fake coin among several with a balance scale."""

    def __init__(self, max_turns=4, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.n = random.randint(6, 9)
        self.fake = random.randint(1, self.n)
        self.turn_count = 0
        obs = (
            "Coins 1 to " + str(self.n) + " look alike, but one is a heavier "
            "fake. Weigh two groups with \\boxed{1 2 3 vs 4 5 6}, or name the "
            "fake with \\boxed{5}. A wrong name loses. You have " + str(self.max_turns) + " turns."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{([\d ]{1,40}?)(?:vs([\d ]{1,40}))?\}", action)
        if not m:
            return "Weigh as \\boxed{1 2 vs 3 4} or name \\boxed{k}.", -0.1, False, truncated, {}
        left = [int(x) for x in m.group(1).split()]
        if m.group(2) is None:
            if len(left) != 1 or not 1 <= left[0] <= self.n:
                return "Name one coin.", -0.1, False, truncated, {}
            if left[0] == self.fake:
                return "Found it!", 1.0, True, False, {}
            return "Wrong. The fake was " + str(self.fake) + ".", 0.0, True, False, {}
        right = [int(x) for x in m.group(2).split()]
        coins = left + right
        if len(set(coins)) < len(coins) or not set(coins) <= set(range(1, self.n + 1)):
            return "Use distinct coin numbers.", -0.1, False, truncated, {}
        a, b = len(left) + (self.fake in left), len(right) + (self.fake in right)
        if a == b:
            obs = "The scale balances."
        else:
            obs = ("Left" if a > b else "Right") + " side is heavier."
        return obs, 0.0, False, truncated, {}

    def solution(self):
        return "\\boxed{" + str(self.fake) + "}"
