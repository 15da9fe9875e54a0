import random
import re


class VanLoadsEnv:
    """Single answer: the fewest van trips that carry every parcel."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.cap = random.randint(10, 15)
        self.parcels = [random.randint(2, 9) for _ in range(random.randint(5, 7))]
        items = sorted(self.parcels, reverse=True)
        self.answer = 1
        while not self._fits(items, [self.cap] * self.answer):
            self.answer += 1
        self.turn_count = 0
        obs = (
            "A van carries at most " + str(self.cap) + " kg per trip. Parcels weigh "
            + ", ".join(str(w) for w in self.parcels) + " kg and cannot be split. "
            "What is the fewest number of trips that moves all of them? Answer as \\boxed{n}."
        )
        return obs, {"cap": self.cap, "parcels": self.parcels}

    def _fits(self, items, room):
        if not items:
            return True
        for i in range(len(room)):
            if room[i] >= items[0]:
                room[i] -= items[0]
                ok = self._fits(items[1:], room)
                room[i] += items[0]
                if ok:
                    return True
        return False

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
