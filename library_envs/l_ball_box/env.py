import random
import re


class BallBoxEnv:
    """Single answer: find which of six boxes holds the ball from true clues."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        ball = random.randint(1, 6)
        boxes, clues = set(range(1, 7)), []
        while len(boxes) > 1:
            kind = random.randint(0, 3)
            if kind == 0:
                k = random.choice([b for b in range(1, 7) if b != ball])
                text, allowed = "not in box %d" % k, set(range(1, 7)) - {k}
            elif kind == 1 and ball > 1:
                k = random.randint(2, ball)
                text, allowed = "in box %d or higher" % k, set(range(k, 7))
            elif kind == 2 and ball < 6:
                k = random.randint(ball, 5)
                text, allowed = "in box %d or lower" % k, set(range(1, k + 1))
            elif kind == 3:
                text = "in an " + ("odd", "even")[ball % 2 == 0] + "-numbered box"
                allowed = set(range(2 - ball % 2, 7, 2))
            else:
                continue
            if not boxes <= allowed:
                boxes &= allowed
                clues.append("The ball is " + text + ".")
        self.answer = str(ball)
        self.turn_count = 0
        obs = (
            "A ball is hidden in one of boxes 1 to 6. " + " ".join(clues)
            + " Which box holds it? Answer with its number inside \\boxed{}."
        )
        return obs, {"clues": clues}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip() == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong. It was box " + self.answer + ".", 0.0, True, False, {}

    def solution(self):
        return self.answer
