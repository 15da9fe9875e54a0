import random
import re


class BridgeTorchEnv:
    """Single answer: the least time for four hikers to cross a bridge with one torch."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.times = random.sample(range(1, 16), 4)
        a, b, c, d = sorted(self.times)
        self.answer = min(a + 3 * b + d, 2 * a + b + c + d)
        self.turn_count = 0
        obs = (
            "Four hikers must cross a narrow bridge at night. They take "
            + ", ".join(str(t) for t in self.times) + " minutes to cross alone. At most two "
            "cross at once, walking at the slower one's pace, and every crossing needs "
            "their single torch, so someone must carry it back. What is the least total "
            "time in minutes for all four to cross? Answer as \\boxed{n}."
        )
        return obs, {"times": self.times}

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
