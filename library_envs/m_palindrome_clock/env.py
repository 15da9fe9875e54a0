import random
import re


def show(t):
    return str(t // 60).zfill(2) + ":" + str(t % 60).zfill(2)


class PalindromeClockEnv:
    """Single answer: the next time a 24-hour clock reads the same backwards."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.start = random.randint(0, 1439)
        t = (self.start + 1) % 1440
        while show(t).replace(":", "") != show(t).replace(":", "")[::-1]:
            t = (t + 1) % 1440
        self.answer = t
        self.turn_count = 0
        obs = (
            "A 24-hour digital clock shows " + show(self.start) + ". Times like 13:31 "
            "read the same backwards (1331). What is the next such time after "
            + show(self.start) + "? Answer as \\boxed{HH:MM}."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*(\d{2}):(\d{2})\s*\}", action)
        if not m:
            return "Answer as \\boxed{HH:MM}.", -0.1, False, truncated, {}
        if m.group(1) + ":" + m.group(2) == show(self.answer):
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return show(self.answer)
