import random
import re

GROUPS = {"fruits": ["apple", "banana", "cherry", "grape", "mango", "pear"],
          "vehicles": ["bus", "truck", "bicycle", "train", "tractor", "van"],
          "instruments": ["piano", "violin", "drum", "flute", "guitar", "trumpet"],
          "furniture": ["sofa", "table", "chair", "wardrobe", "shelf", "bed"],
          "animals": ["horse", "rabbit", "tiger", "sheep", "fox", "camel"],
          "tools": ["hammer", "saw", "wrench", "drill", "chisel", "pliers"]}


class OddOneEnv:
    """Single answer: pick the word that does not belong with the others."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        main, other = random.sample(sorted(GROUPS), 2)
        self.answer = random.choice(GROUPS[other])
        words = random.sample(GROUPS[main], 4) + [self.answer]
        random.shuffle(words)
        self.turn_count = 0
        obs = (
            "Four of these words name the same kind of thing and one does not: "
            + ", ".join(words) + ". Which word is the odd one out? "
            "Answer inside \\boxed{}."
        )
        return obs, {"words": words}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().lower() == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong. The odd one was " + self.answer + ".", 0.0, True, False, {}

    def solution(self):
        return self.answer
