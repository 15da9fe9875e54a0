import random
import re


def money(c):
    return str(c // 100) + "." + str(c % 100).zfill(2)


class ChangeDueEnv:
    """Single answer: the change owed after paying for a shopping list with one bill."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        goods = random.sample(["milk", "bread", "apples", "eggs", "coffee", "pasta", "soap"], 3)
        parts, total = [], 0
        for name in goods:
            qty, price = random.randint(1, 4), random.randint(45, 699)
            total += qty * price
            parts.append(str(qty) + " x " + name + " at $" + money(price))
        bill = 2000 if total < 2000 else (5000 if total < 5000 else 10000)
        self.answer = bill - total
        self.turn_count = 0
        obs = (
            "A shopper buys " + ", ".join(parts) + " and pays with a $" + str(bill // 100)
            + " bill. How much change is due, in dollars? Answer like \\boxed{3.25}."
        )
        return obs, {"bill": bill // 100}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*\$?(\d{1,4})\.(\d{2})\s*\}", action)
        if not m:
            return "Answer like \\boxed{3.25}.", -0.1, False, truncated, {}
        if int(m.group(1)) * 100 + int(m.group(2)) == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return money(self.answer)
