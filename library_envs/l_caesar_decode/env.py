import random
import re

WORDS = ["garden", "planet", "silver", "window", "bridge", "forest",
         "candle", "rocket", "yellow", "button", "market", "pillow"]


class CaesarDecodeEnv:
    """Single answer: undo a Caesar shift to recover an English word."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.word = random.choice(WORDS)
        self.shift = random.randint(1, 6)
        self.code = "".join(
            chr((ord(c) - 97 + self.shift) % 26 + 97) for c in self.word
        )
        self.turn_count = 0
        obs = (
            "Each letter of an English word was moved " + str(self.shift)
            + " places forward in the alphabet (z wraps around to a), giving '"
            + self.code + "'. What was the original word? "
            "Answer inside \\boxed{}."
        )
        return obs, {"code": self.code, "shift": self.shift}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().lower() == self.word:
            return "Correct!", 1.0, True, False, {}
        return "Wrong. The word was " + self.word + ".", 0.0, True, False, {}

    def solution(self):
        return self.word
