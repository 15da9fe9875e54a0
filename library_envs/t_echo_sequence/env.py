import random
import re


class EchoSequenceEnv:
    """Multi-turn: repeat a shown colour sequence back one colour per turn."""

    COLOURS = ["red", "blue", "green", "yellow", "purple", "orange"]

    def __init__(self, max_turns=8, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.sequence = [random.choice(self.COLOURS)
                         for _ in range(random.randint(4, 7))]
        self.pos = 0
        self.turn_count = 0
        obs = (
            "Memorise this sequence: " + " ".join(self.sequence) + ". "
            "Now repeat it one colour per turn, in order, as \\boxed{colour}. "
            "A wrong colour ends the game. Give colour 1 of "
            + str(len(self.sequence)) + "."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Give one colour as \\boxed{colour}.", -0.1, False, truncated, {}
        if m.group(1).strip().lower() != self.sequence[self.pos]:
            return "Wrong colour. Game over.", 0.0, True, False, {}
        self.pos += 1
        if self.pos == len(self.sequence):
            return "Perfect recall!", 1.0, True, False, {}
        obs = "Right. Give colour %d of %d." % (self.pos + 1, len(self.sequence))
        return obs, 0.1, False, truncated, {}

    def solution(self):
        return " ".join("\\boxed{" + c + "}" for c in self.sequence)
