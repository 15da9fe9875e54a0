import random
import re


class CompassTurnsEnv:
    """Single answer: which way a walker faces after a list of turns."""

    DIRS = ["north", "east", "south", "west"]
    TURNS = {"right": 1, "left": -1, "around": 2}

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        start = random.randrange(4)
        self.turns = [random.choice(list(self.TURNS)) for _ in range(random.randint(3, 7))]
        self.answer = self.DIRS[(start + sum(self.TURNS[t] for t in self.turns)) % 4]
        self.turn_count = 0
        obs = (
            "A walker faces " + self.DIRS[start] + ". They turn " + ", ".join(self.turns)
            + " (right and left are quarter turns, around is a half turn). "
            "Which way do they face now? Answer as \\boxed{north}, \\boxed{east}, "
            "\\boxed{south} or \\boxed{west}."
        )
        return obs, {"turns": len(self.turns)}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        value = m.group(1).strip().lower()
        if value not in self.DIRS:
            return "Answer north, east, south or west.", 0.0, False, truncated, {}
        if value == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return self.answer
