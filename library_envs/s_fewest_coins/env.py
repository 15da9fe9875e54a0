import random
import re


class FewestCoinsEnv:
    """Single answer: the fewest coins that pay an amount exactly."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.coins = sorted([1] + random.sample(range(3, 15), 3))
        self.amount = random.randint(20, 70)
        best = [0]
        for a in range(1, self.amount + 1):
            best.append(1 + min(best[a - c] for c in self.coins if c <= a))
        self.answer = best[self.amount]
        self.turn_count = 0
        values = ", ".join(str(c) for c in self.coins)
        obs = (
            "Coins have the values " + values + ", with as many of each as you want. "
            "What is the fewest number of coins that add up to exactly "
            + str(self.amount) + "? Answer as \\boxed{n}."
        )
        return obs, {"coins": self.coins, "amount": self.amount}

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
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return str(self.answer)
