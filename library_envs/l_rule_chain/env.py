import random
import re

TERMS = ["blips", "zorks", "wugs", "daxes", "feps", "glims", "tovs", "murks"]


class RuleChainEnv:
    """Single answer: decide whether an 'all A are B' claim follows from rules."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        t = random.sample(TERMS, 6)
        edges = [(t[0], t[1]), (t[1], t[2]), (t[2], t[3]), (t[4], t[2]), (t[5], t[4])]
        rules = ["All " + a + " are " + b + "." for a, b in edges]
        random.shuffle(rules)
        while True:
            p, q = random.sample(t, 2)
            reach, frontier = {p}, [p]
            while frontier:
                x = frontier.pop()
                for a, b in edges:
                    if a == x and b not in reach:
                        reach.add(b)
                        frontier.append(b)
            yes = q in reach
            if yes == (random.random() < 0.5):
                break
        self.answer = "yes" if yes else "no"
        self.turn_count = 0
        obs = (
            "Rules: " + " ".join(rules) + " Using only these rules, does it "
            "follow for certain that all " + p + " are " + q + "? Answer yes or "
            "no inside \\boxed{}."
        )
        return obs, {"rules": rules}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().lower() == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong. The answer is " + self.answer + ".", 0.0, True, False, {}

    def solution(self):
        return self.answer
