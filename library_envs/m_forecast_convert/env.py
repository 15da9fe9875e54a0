import random
import re

DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


class ForecastConvertEnv:
    """Multi-turn: convert a week's Celsius forecast to Fahrenheit, one day per turn."""

    def __init__(self, max_turns=6, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        first = random.randint(0, 3)
        self.days = DAYS[first:first + 4]
        self.temps = [random.randrange(-15, 41, 5) for _ in self.days]
        self.done = 0
        self.turn_count = 0
        obs = (
            "Forecast in Celsius: " + ", ".join(d + " " + str(t) for d, t in zip(self.days, self.temps))
            + ". F = C * 9 / 5 + 32. Convert each day to Fahrenheit in order, one per "
            "turn, as \\boxed{n}. First: " + self.days[0] + "."
        )
        return obs, {}

    def step(self, action):
        if self.done == len(self.days):
            return "All days are converted.", 0.0, True, False, {}
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*(-?\d{1,4})\s*\}", action)
        if not m:
            return "Give one whole number as \\boxed{n}.", -0.1, False, truncated, {}
        if int(m.group(1)) != self.temps[self.done] * 9 // 5 + 32:
            return "Not right for " + self.days[self.done] + ". Try again.", 0.0, False, truncated, {}
        self.done += 1
        if self.done == len(self.days):
            return "Correct, forecast converted!", 1.0, True, False, {}
        obs = "Right. Next: " + self.days[self.done] + "."
        return obs, 0.1, False, truncated, {}

    def solution(self):
        return " ".join("\\boxed{" + str(t * 9 // 5 + 32) + "}" for t in self.temps[self.done:])
