import random
import re


class MarketDaysEnv:
    """Multi-turn: trade one crate over six days of known prices for the most profit."""

    def __init__(self, max_turns=10, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.prices = [random.randint(10, 30) for _ in range(6)]
        p = self.prices
        self.best = sum(max(0, p[i + 1] - p[i]) for i in range(5))
        self.day, self.cash, self.holding, self.turn_count = 0, 0, False, 0
        rules = (
            "A crate of apples will cost " + ", ".join(str(x) for x in p) + " coins on days "
            "1-6. Each day \\boxed{buy}, \\boxed{sell} or \\boxed{wait}; you may hold one "
            "crate at most and start with none. End day 6 with the largest possible profit "
            "and no crate."
        )
        return self._show(rules), {}

    def _show(self, msg):
        return msg + " Day " + str(self.day + 1) + ", profit " + str(self.cash) + "."

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*(buy|sell|wait)\s*\}", action.lower())
        if not m:
            return self._show("Bad action."), -0.1, False, truncated, {}
        act = m.group(1)
        if (act == "buy") == self.holding and act != "wait":
            return self._show("You cannot " + act + " now."), 0.0, False, truncated, {}
        if act != "wait":
            self.holding = act == "buy"
            self.cash += self.prices[self.day] * (-1 if self.holding else 1)
        self.day += 1
        if self.day == 6:
            won = self.cash == self.best and not self.holding
            return self._show("Done."), float(won), True, False, {}
        return self._show("OK."), 0.02, False, truncated, {}

    def solution(self):
        p, holding, acts = self.prices, False, []
        for i in range(6):
            if not holding and i < 5 and p[i + 1] > p[i]:
                acts.append("buy")
                holding = True
            elif holding and (i == 5 or p[i + 1] < p[i]):
                acts.append("sell")
                holding = False
            else:
                acts.append("wait")
        return " ".join("\\boxed{" + a + "}" for a in acts)
