import random
import re


class QuadrantMoveEnv:
    """Single answer: the quadrant a point lands in after a few moves."""

    STEPS = {"right": (1, 0), "left": (-1, 0), "up": (0, 1), "down": (0, -1)}
    ROMAN = {"I": "1", "II": "2", "III": "3", "IV": "4"}

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        while True:
            x, y = random.randint(-6, 6), random.randint(-6, 6)
            start = (x, y)
            moves = []
            for _ in range(3):
                name, n = random.choice(list(self.STEPS)), random.randint(1, 8)
                moves.append(name + " " + str(n))
                x += self.STEPS[name][0] * n
                y += self.STEPS[name][1] * n
            if x != 0 and y != 0:
                break
        self.answer = (1 if y > 0 else 4) if x > 0 else (2 if y > 0 else 3)
        self.turn_count = 0
        obs = (
            "A point starts at " + str(start) + " and moves " + ", then ".join(moves) + ". "
            "In which quadrant does it end (1 = x>0,y>0; 2 = x<0,y>0; 3 = x<0,y<0; 4 = x>0,y<0)? "
            "Answer as \\boxed{n}."
        )
        return obs, {"start": start}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        text = m.group(1).strip().upper()
        value = self.ROMAN.get(text, text)
        if value not in self.ROMAN.values():
            return "Answer with a quadrant from 1 to 4.", 0.0, False, truncated, {}
        if value == str(self.answer):
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return str(self.answer)
