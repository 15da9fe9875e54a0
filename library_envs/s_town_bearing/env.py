import random
import re


class TownBearingEnv:
    """Single answer: the compass direction from one town to another on a map."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        steps = {"N": (0, 1), "NE": (1, 1), "E": (1, 0), "SE": (1, -1),
                 "S": (0, -1), "SW": (-1, -1), "W": (-1, 0), "NW": (-1, 1)}
        self.answer = random.choice(sorted(steps))
        k = random.randint(1, 9)
        a = (random.randint(-9, 9), random.randint(-9, 9))
        b = (a[0] + k * steps[self.answer][0], a[1] + k * steps[self.answer][1])
        names = random.sample(["Ashford", "Brill", "Colton", "Dunmore", "Elstow", "Frome"], 2)
        self.turn_count = 0
        obs = (
            "On a map, x grows to the east and y grows to the north. " + names[0]
            + " is at " + str(a) + " and " + names[1] + " is at " + str(b) + ". In which "
            "of the eight compass directions (N, NE, E, SE, S, SW, W, NW) does one travel "
            "from " + names[0] + " to " + names[1] + "? Answer as \\boxed{direction}."
        )
        return obs, {"from": a, "to": b}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().upper() == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return self.answer
