import random
import re


def show(t):
    return str(t // 60).zfill(2) + ":" + str(t % 60).zfill(2)


class ClockLaterEnv:
    """Single answer: the clock time after a number of minutes have passed."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        start = random.randint(0, 1439)
        wait = random.randint(25, 1000)
        self.answer = (start + wait) % 1440
        self.turn_count = 0
        obs = (
            "A 24-hour clock shows " + show(start) + ". What will it show "
            + str(wait) + " minutes later? Answer as \\boxed{HH:MM}."
        )
        return obs, {"start": show(start), "minutes": wait}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*(\d{1,2}):(\d{2})\s*\}", action)
        if not m:
            return "Answer as \\boxed{HH:MM}.", -0.1, False, truncated, {}
        if int(m.group(1)) * 60 + int(m.group(2)) == self.answer and int(m.group(2)) < 60:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return show(self.answer)
