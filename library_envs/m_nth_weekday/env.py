import random
import re

DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
NTH = ["first", "second", "third", "fourth", "last"]


class NthWeekdayEnv:
    """Single answer: the date of the nth given weekday in a month."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        start, day = random.randint(0, 6), random.randint(0, 6)
        length, k = random.choice([28, 29, 30, 31]), random.randint(0, 4)
        dates = list(range(1 + (day - start) % 7, length + 1, 7))
        self.answer = dates[-1] if k == 4 else dates[k]
        self.turn_count = 0
        obs = (
            "A month has " + str(length) + " days and its 1st is a " + DAYS[start]
            + ". On which date falls the " + NTH[k] + " " + DAYS[day]
            + " of the month? Answer with the day number inside \\boxed{}."
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
            return "The answer must be a day number.", 0.0, False, truncated, {}
        if value == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return str(self.answer)
