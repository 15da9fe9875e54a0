import random
import re

RULES = {
    "a*b+a": lambda a, b: a * b + a, "a*b-b": lambda a, b: a * b - b,
    "a*a+b": lambda a, b: a * a + b, "a+b*b": lambda a, b: a + b * b,
    "2*a+3*b": lambda a, b: 2 * a + 3 * b, "(a+b)*2": lambda a, b: (a + b) * 2,
    "a*b+1": lambda a, b: a * b + 1, "3*a-b": lambda a, b: 3 * a - b,
}


def apply(rule, a, b):
    return RULES[rule](a, b)


class RowRuleEnv:
    """Single answer: find which rule turns number pairs into results and apply it."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        while True:
            rule = random.choice(sorted(RULES))
            pairs = [(random.randint(2, 9), random.randint(2, 9)) for _ in range(4)]
            fits = [r for r in RULES if all(apply(r, a, b) == apply(rule, a, b) for a, b in pairs[:3])]
            if fits == [rule]:
                break
        a, b = pairs[3]
        self.answer = apply(rule, a, b)
        self.turn_count = 0
        rows = ["(" + str(x) + ", " + str(y) + ") -> " + str(apply(rule, x, y)) for x, y in pairs[:3]]
        obs = (
            "Each pair (a, b) becomes a result by one of these rules: " + ", ".join(RULES)
            + ". Examples: " + "; ".join(rows) + ". What does (" + str(a) + ", " + str(b)
            + ") become? Answer inside \\boxed{}."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        try:
            value = int(m.group(1).strip())
        except ValueError:
            return "The answer must be an integer.", 0.0, False, truncated, {}
        if value == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return str(self.answer)
