import random
import re

NAMES = ["Ana", "Ben", "Chloe", "Dev"]


class FreeHourEnv:
    """Single answer: find the one hour when everyone is free for a meeting."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        names = random.sample(NAMES, 3)
        free = random.randint(9, 16)
        busy = {}
        while not busy or not all(busy.values()):
            busy = {n: set() for n in names}
            for h in range(9, 17):
                if h != free:
                    for n in random.sample(names, random.randint(1, 2)):
                        busy[n].add(h)
        lines = []
        for n in names:
            hours = [str(h) + ":00" for h in sorted(busy[n])]
            lines.append(n + " has one-hour meetings starting at " + ", ".join(hours) + ".")
        self.answer = str(free)
        self.turn_count = 0
        obs = (
            "Three colleagues work from 9:00 to 17:00. " + " ".join(lines)
            + " At what hour does the only one-hour slot start when all three are "
            "free? Answer with the hour (like 14) inside \\boxed{}."
        )
        return obs, {"busy": {n: sorted(busy[n]) for n in names}}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*(\d+)", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1) == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong. All are free at " + self.answer + ":00.", 0.0, True, False, {}

    def solution(self):
        return self.answer
