import random
import re

NAMES = ["Ava", "Ben", "Cara", "Dan", "Eli", "Fay", "Gus", "Hana"]


class HeightOrderEnv:
    """Single answer: find the tallest or shortest person from comparisons."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        order = random.sample(NAMES, 5)
        clues = []
        for tall, short in zip(order, order[1:]):
            if random.random() < 0.5:
                clues.append(tall + " is taller than " + short + ".")
            else:
                clues.append(short + " is shorter than " + tall + ".")
        random.shuffle(clues)
        self.ask = random.choice(["tallest", "shortest"])
        self.answer = order[0] if self.ask == "tallest" else order[-1]
        self.turn_count = 0
        obs = (
            " ".join(clues) + " Who is the " + self.ask
            + "? Answer with the name inside \\boxed{}."
        )
        return obs, {"clues": clues}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().lower() == self.answer.lower():
            return "Correct!", 1.0, True, False, {}
        return "Wrong. It is " + self.answer + ".", 0.0, True, False, {}

    def solution(self):
        return self.answer
