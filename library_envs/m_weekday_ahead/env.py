import random
import re

DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


class WeekdayAheadEnv:
    """Single answer: the weekday a given number of days after a named weekday."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        start = random.randint(0, 6)
        ahead = random.randint(8, 500)
        self.answer = DAYS[(start + ahead) % 7]
        self.turn_count = 0
        obs = (
            "Today is " + DAYS[start] + ". What day of the week will it be in "
            + str(ahead) + " days? Answer with the day's name inside \\boxed{}."
        )
        return obs, {"today": DAYS[start], "days": ahead}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().lower() == self.answer.lower():
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return self.answer
