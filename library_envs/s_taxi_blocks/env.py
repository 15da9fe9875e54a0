import random
import re


class TaxiBlocksEnv:
    """Single answer: the fewest blocks a taxi drives on a street grid via one stop."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.points = [(random.randint(-9, 9), random.randint(-9, 9)) for _ in range(3)]
        (ax, ay), (bx, by), (cx, cy) = self.points
        self.answer = abs(ax - bx) + abs(ay - by) + abs(bx - cx) + abs(by - cy)
        self.turn_count = 0
        start, stop, end = (str(p) for p in self.points)
        obs = (
            "A taxi drives only along the streets of a square grid (east-west or north-south). "
            "It starts at " + start + ", picks up a passenger at " + stop
            + " and drops them at " + end + ". How many blocks does it drive at least? "
            "Answer as \\boxed{n}."
        )
        return obs, {"points": self.points}

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
