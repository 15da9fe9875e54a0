import random
import re

MONTHS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def date(day):
    month = 0
    while day > MONTHS[month]:
        day -= MONTHS[month]
        month += 1
    return str(month + 1) + "/" + str(day)


class PaydayDatesEnv:
    """Multi-turn: continue a list of evenly spaced paydays across month ends."""

    def __init__(self, max_turns=5, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        gap = random.choice([7, 10, 14, 21, 28])
        first = random.randint(1, 365 - 5 * gap)
        days = [first + gap * i for i in range(6)]
        self.shown, self.hidden = [date(d) for d in days[:3]], [date(d) for d in days[3:]]
        self.turn_count = 0
        obs = (
            "In a non-leap year, paydays are always the same number of days apart. The "
            "first three paydays are " + ", ".join(self.shown) + " (month/day). Give the next 3, "
            "one per turn, as \\boxed{month/day}."
        )
        return obs, {}

    def step(self, action):
        if not self.hidden:
            return "All paydays are found.", 0.0, True, False, {}
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*(\d{1,2})\s*/\s*(\d{1,2})\s*\}", action)
        if not m:
            return "Answer as \\boxed{month/day}.", -0.1, False, truncated, {}
        if str(int(m.group(1))) + "/" + str(int(m.group(2))) != self.hidden[0]:
            return "Not the next payday. Try again.", 0.0, False, truncated, {}
        self.shown.append(self.hidden.pop(0))
        if not self.hidden:
            return "Correct, all paydays found!", 1.0, True, False, {}
        obs = "Right. Paydays so far: " + ", ".join(self.shown) + "."
        return obs, 0.2, False, truncated, {}

    def solution(self):
        return " ".join("\\boxed{" + d + "}" for d in self.hidden)
