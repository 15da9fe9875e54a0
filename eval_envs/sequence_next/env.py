import random
import re


class SequenceNextEnv:
    """Single answer: the next term of an arithmetic or geometric sequence."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        start = random.randint(1, 9)
        if random.random() < 0.5:
            step = random.randint(2, 9)
            terms = [start + step * i for i in range(6)]
        else:
            ratio = random.randint(2, 3)
            terms = [start * ratio**i for i in range(6)]
        self.shown = terms[:5]
        self.answer = terms[5]
        self.turn_count = 0
        shown = ", ".join(str(t) for t in self.shown)
        obs = f"What number comes next: {shown}, ? Answer inside \\boxed{{}}."
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip() == str(self.answer):
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return str(self.answer)
