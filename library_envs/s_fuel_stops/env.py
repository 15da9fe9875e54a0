import random
import re


class FuelStopsEnv:
    """Multi-turn: drive to a city with the fewest refuelling stops."""

    def __init__(self, max_turns=14, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.range = random.randint(20, 35)
        self.end = random.randint(80, 130)
        self.stations, pos = [], random.randint(5, self.range)
        while pos < self.end:
            self.stations.append(pos)
            pos += random.randint(5, self.range)
        self.pos, self.stops, self.turn_count = 0, 0, 0
        self.best = len(self._plan()) - 1
        obs = (
            "A full tank lasts " + str(self.range) + " km. The city is at km "
            + str(self.end) + "; fuel stations stand at km "
            + ", ".join(str(s) for s in self.stations) + ". You start at km 0 with a full "
            "tank. Each turn drive ahead to a station and refill with \\boxed{km}, or to the "
            "city with \\boxed{" + str(self.end) + "}. Arrive with the fewest stops."
        )
        return obs, {}

    def _plan(self):
        pos, plan = self.pos, []
        while pos + self.range < self.end:
            pos = max(s for s in self.stations if s <= pos + self.range)
            plan.append(pos)
        return plan + [self.end]

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*(\d{1,4})\s*\}", action)
        if not m:
            return "Drive with \\boxed{km}.", -0.1, False, truncated, {}
        km = int(m.group(1))
        if km not in self.stations + [self.end] or not self.pos < km <= self.pos + self.range:
            return "You cannot drive there from km " + str(self.pos) + ".", 0.0, False, truncated, {}
        self.pos = km
        if km == self.end:
            if self.stops == self.best:
                return "Arrived with the fewest stops!", 1.0, True, False, {}
            return "Arrived, but with too many stops.", 0.0, True, False, {}
        self.stops += 1
        return "Refilled at km " + str(km) + ".", 0.05, False, truncated, {}

    def solution(self):
        return " ".join("\\boxed{" + str(km) + "}" for km in self._plan())
