import random
import re


def show(t):
    return str(t // 60).zfill(2) + ":" + str(t % 60).zfill(2)


class BusDeparturesEnv:
    """Multi-turn: continue a bus timetable whose gaps repeat, one departure per turn."""

    def __init__(self, max_turns=5, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        gaps = random.sample([5, 8, 10, 12, 15, 20, 25], random.randint(2, 3))
        times = [random.randint(300, 540)]
        for i in range(2 * len(gaps) + 3):
            times.append(times[-1] + gaps[i % len(gaps)])
        self.shown, self.hidden = times[:-3], times[-3:]
        self.turn_count = 0
        obs = (
            "Buses leave at " + ", ".join(show(t) for t in self.shown) + ". The gaps "
            "between buses repeat in a fixed cycle. Give the next 3 departures, one per "
            "turn, as \\boxed{HH:MM}."
        )
        return obs, {}

    def step(self, action):
        if not self.hidden:
            return "The timetable is complete.", 0.0, True, False, {}
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*(\d{1,2}):(\d{2})\s*\}", action)
        if not m:
            return "Answer as \\boxed{HH:MM}.", -0.1, False, truncated, {}
        if m.group(1).zfill(2) + ":" + m.group(2) != show(self.hidden[0]):
            return "Not the next bus. Try again.", 0.0, False, truncated, {}
        self.shown.append(self.hidden.pop(0))
        if not self.hidden:
            return "Correct, timetable complete!", 1.0, True, False, {}
        obs = "Right. Last bus so far: " + show(self.shown[-1]) + "."
        return obs, 0.2, False, truncated, {}

    def solution(self):
        return " ".join("\\boxed{" + show(t) + "}" for t in self.hidden)
