import random
import re


class RashOnsetEnv:
    """Single answer: find which new medicine caused a rash that appears after a delay."""

    MEDS = ["aspirin", "ibuprofen", "penicillin", "statin", "antacid", "iron", "zinc"]

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        lag = random.randint(1, 3)
        meds = random.sample(self.MEDS, 5)
        days = sorted(random.sample(range(1, 9), 5))
        start = dict(zip(meds, days))
        self.answer = random.choice(meds)
        rash = start[self.answer] + lag
        lines = ["day " + str(d) + ": started " + m for m, d in start.items()]
        for _ in range(3):
            m = random.choice(meds)
            lines.append("day " + str(random.randint(start[m] + 1, 12))
                         + ": took " + m + " again")
        lines.sort(key=lambda s: int(s.split(":")[0][4:]))
        self.turn_count = 0
        obs = (
            "Medicine diary:\n" + "\n".join(lines) + "\nA rash appeared on day "
            + str(rash) + ". The medicine behind it causes a rash exactly " + str(lag)
            + " day(s) after it is first taken. Which medicine is it? Answer inside \\boxed{}."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer a medicine inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().lower() == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong, it was " + self.answer + ".", 0.0, True, False, {}

    def solution(self):
        return self.answer
