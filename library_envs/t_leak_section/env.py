import random
import re


class LeakSectionEnv:
    """Single answer: locate a pipe leak from pressure readings taken along the line."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        meters = random.sample("BDFGHKMPRT", random.randint(6, 8))
        k = random.randint(1, len(meters) - 1)
        self.answer = meters[k - 1]
        readings = [(m, "normal" if i < k else "low") for i, m in enumerate(meters)]
        random.shuffle(readings)
        self.turn_count = 0
        obs = (
            "Pressure meters along a water main, in order from the pump: "
            + " ".join(meters) + ". Readings: "
            + ", ".join(m + " " + r for m, r in readings) + ". Pressure drops only "
            "after the leak. The leak lies just after which meter? Answer with its "
            "letter inside \\boxed{}."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer a meter letter inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().upper() == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong, it was " + self.answer + ".", 0.0, True, False, {}

    def solution(self):
        return self.answer
