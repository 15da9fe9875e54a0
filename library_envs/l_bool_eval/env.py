import random
import re


class BoolEvalEnv:
    """Single answer: evaluate a nested boolean expression."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def _build(self, depth):
        if depth == 0:
            name = random.choice("PQRS")
            if random.random() < 0.3:
                return "not " + name, not self.values[name]
            return name, self.values[name]
        left, lv = self._build(depth - 1)
        right, rv = self._build(random.randint(0, depth - 1))
        if random.random() < 0.5:
            return "(" + left + " and " + right + ")", lv and rv
        return "(" + left + " or " + right + ")", lv or rv

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.values = {n: random.random() < 0.5 for n in "PQRS"}
        self.expr, value = self._build(3)
        self.answer = str(value)
        self.turn_count = 0
        given = ", ".join(n + " = " + str(v) for n, v in self.values.items())
        obs = (
            "Given " + given + ", is " + self.expr
            + " True or False? Answer \\boxed{True} or \\boxed{False}."
        )
        return obs, {"expression": self.expr}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        guess = m.group(1).strip().lower()
        if guess not in ("true", "false"):
            return "Answer True or False.", 0.0, False, truncated, {}
        if guess == self.answer.lower():
            return "Correct!", 1.0, True, False, {}
        return "Wrong. It is " + self.answer + ".", 0.0, True, False, {}

    def solution(self):
        return self.answer
