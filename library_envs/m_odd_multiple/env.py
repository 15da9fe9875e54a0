import math
import random
import re


def common(nums):
    g = 0
    for n in nums:
        g = math.gcd(g, n)
    return g


class OddMultipleEnv:
    """Single answer: spot the one number that breaks a common factor."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        while True:
            k = random.randint(3, 13)
            nums = [k * m for m in random.sample(range(2, 20), 6)]
            self.answer = random.randint(10, k * 20)
            nums.insert(random.randint(0, 6), self.answer)
            rests = [common(nums[:i] + nums[i + 1:]) for i in range(7)]
            if self.answer % k and sum(g > 1 for g in rests) == 1:
                break
        self.turn_count = 0
        obs = (
            "All but one of these numbers share a common factor greater than 1: "
            + ", ".join(str(n) for n in nums)
            + ". Which number is the odd one out? Answer inside \\boxed{}."
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
            return "Answer with one of the numbers.", 0.0, False, truncated, {}
        if value == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return str(self.answer)
