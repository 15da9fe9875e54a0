import random
import re


class KnapsackPackEnv:
    """Single answer: the largest total value that fits in a bag's weight limit."""

    NAMES = ["lamp", "book", "radio", "kettle", "drum"]

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.items = [(name, random.randint(2, 9), random.randint(3, 20)) for name in self.NAMES]
        self.limit = random.randint(10, 20)
        self.answer = 0
        for mask in range(1 << len(self.items)):
            chosen = [it for i, it in enumerate(self.items) if (mask >> i) & 1]
            if sum(w for _, w, _ in chosen) <= self.limit:
                self.answer = max(self.answer, sum(v for _, _, v in chosen))
        self.turn_count = 0
        lines = ["- " + n + ": weight " + str(w) + ", value " + str(v) for n, w, v in self.items]
        obs = (
            "Pack a bag that holds a total weight of at most " + str(self.limit) + ".\n"
            + "\n".join(lines)
            + "\nEach item can be taken once. What is the largest total value you can pack? "
            "Answer as \\boxed{n}."
        )
        return obs, {"limit": self.limit}

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
