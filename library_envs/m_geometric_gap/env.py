import random
import re


class GeometricGapEnv:
    """Single answer: fill the missing term of a geometric sequence."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        start = random.randint(1, 9)
        ratio = random.choice([-3, -2, 2, 3, 4, 5])
        terms = [start * ratio ** i for i in range(6)]
        gap = random.randint(1, 5)
        self.answer = terms[gap]
        shown = [str(t) for t in terms]
        shown[gap] = "?"
        self.turn_count = 0
        obs = (
            "Each term is the previous one times a fixed ratio: " + ", ".join(shown)
            + ". What is the missing term? Answer inside \\boxed{}."
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
            return "The missing term is an integer.", 0.0, False, truncated, {}
        if value == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return str(self.answer)
