import random
import re


class RoadTripEnv:
    """Single answer: the shortest driving distance between two towns on a road list."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        n = random.randint(5, 6)
        towns = "ABCDEF"[:n]
        self.roads = {}
        for i in range(1, n):
            self.roads[(towns[random.randrange(i)], towns[i])] = random.randint(5, 40)
        while len(self.roads) < n + 2:
            a, b = sorted(random.sample(towns, 2))
            self.roads.setdefault((a, b), random.randint(5, 40))
        best = {t: 10 ** 9 for t in towns}
        best["A"] = 0
        for _ in range(n):
            for (a, b), km in self.roads.items():
                best[b] = min(best[b], best[a] + km)
                best[a] = min(best[a], best[b] + km)
        self.goal = towns[-1]
        self.answer = best[self.goal]
        self.turn_count = 0
        listing = "; ".join(a + "-" + b + " " + str(km) + " km" for (a, b), km in self.roads.items())
        obs = (
            "Two-way roads between towns: " + listing + ". What is the shortest distance "
            "in km to drive from A to " + self.goal + "? Answer as \\boxed{n}."
        )
        return obs, {"roads": len(self.roads)}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        try:
            value = int(m.group(1).strip())
        except ValueError:
            return "The answer must be a whole number.", 0.0, False, truncated, {}
        if value == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return str(self.answer)
