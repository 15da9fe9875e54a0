import random
import re


class PatternExtendEnv:
    """Multi-turn: continue two interleaved sequences, one term per turn."""

    def __init__(self, max_turns=6, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        a, d = random.randint(1, 30), random.choice([-4, -3, -2, 2, 3, 5, 7])
        b, r = random.randint(1, 5), random.choice([2, 3])
        terms = []
        for i in range(5):
            terms += [a + i * d, b * r ** i]
        self.shown, self.hidden = terms[:7], terms[7:]
        self.turn_count = 0
        obs = (
            "Two patterns take turns in this list: " + ", ".join(map(str, self.shown))
            + ". Give the next 3 terms, one per turn, as \\boxed{n}."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        if not self.hidden:
            return "The list is already complete.", 0.0, True, False, {}
        m = re.search(r"\\boxed\{\s*(-?\d{1,12})\s*\}", action)
        if not m:
            return "Give one integer as \\boxed{n}.", -0.1, False, truncated, {}
        if int(m.group(1)) != self.hidden[0]:
            return "Not the next term. Try again.", 0.0, False, truncated, {}
        self.shown.append(self.hidden.pop(0))
        if not self.hidden:
            return "Correct, pattern complete!", 1.0, True, False, {}
        obs = "Right. The list is now: " + ", ".join(map(str, self.shown)) + "."
        return obs, 0.2, False, truncated, {}

    def solution(self):
        return " ".join("\\boxed{" + str(t) + "}" for t in self.hidden)
