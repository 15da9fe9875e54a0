import random
import re


class TileColourEnv:
    """Single answer: the colour of a far tile in a repeating row of tiles."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        size = random.randint(3, 6)
        colours = ["red", "blue", "green", "white", "black"]
        cycle = random.sample(colours, 2) + [random.choice(colours) for _ in range(size - 2)]
        random.shuffle(cycle)
        self.n = random.randint(20, 250)
        self.answer = cycle[(self.n - 1) % size]
        self.turn_count = 0
        obs = (
            "A row of floor tiles repeats the same cycle of " + str(size) + " colours: "
            + ", ".join(cycle * 2) + ", and so on. What colour is tile number "
            + str(self.n) + "? Answer with the colour inside \\boxed{}."
        )
        return obs, {"tile": self.n}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().lower() == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return self.answer
