import random
import re

SHOPS = ["bakery", "pharmacy", "library", "bank", "florist", "butcher"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
SPANS = [(0, 4), (0, 5), (1, 6), (0, 6), (2, 6), (1, 5)]


class ShopOpenEnv:
    """Single answer: find the one shop that is open at a given day and time."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        while True:
            day, hour = random.randint(0, 6), random.randint(8, 19)
            lines, open_now = [], []
            for shop in random.sample(SHOPS, 4):
                a, b = random.choice(SPANS)
                start = random.randint(6, 12)
                end = start + random.randint(4, 10)
                lines.append("The " + shop + " opens " + DAYS[a] + " to " + DAYS[b]
                             + ", from " + str(start) + ":00 until " + str(end) + ":00.")
                if a <= day <= b and start <= hour < end:
                    open_now.append(shop)
            if len(open_now) == 1:
                break
        self.answer = open_now[0]
        self.turn_count = 0
        obs = (
            " ".join(lines) + " Which shop is open on " + DAYS[day] + " at "
            + str(hour) + ":30? Answer with the shop inside \\boxed{}."
        )
        return obs, {"day": DAYS[day], "hour": hour}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().lower().replace("the ", "") == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong. It was the " + self.answer + ".", 0.0, True, False, {}

    def solution(self):
        return self.answer
