import random
import re


class HoopPointsEnv:
    """Single answer: the winning margin of a basketball game from its made shots."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.answer = 0
        while self.answer == 0:
            lines, totals = [], []
            for team in ["Hawks", "Bears"]:
                two, three, free = random.randint(15, 35), random.randint(3, 15), random.randint(5, 25)
                totals.append(2 * two + 3 * three + free)
                lines.append(team + " made " + str(two) + " two-pointers, " + str(three)
                             + " three-pointers and " + str(free) + " free throws")
            self.answer = abs(totals[0] - totals[1])
        self.turn_count = 0
        obs = (
            "; ".join(lines) + ". A two-pointer scores 2, a three-pointer 3 and a free "
            "throw 1. By how many points did the winning team win? Answer inside \\boxed{}."
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
            return "The answer must be an integer.", 0.0, False, truncated, {}
        if value == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return str(self.answer)
