import random
import re


class WordPositionEnv:
    """Single answer: recall which word stood at a given position in a list."""

    WORDS = ["river", "candle", "falcon", "marble", "violet", "anchor", "pepper",
             "glacier", "saddle", "lantern", "orchid", "tunnel", "walnut", "comet"]
    ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth",
                "seventh", "eighth", "ninth"]

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.words = random.sample(self.WORDS, 9)
        self.index = random.randint(2, 8)
        self.turn_count = 0
        obs = (
            "Read this list of words: " + " ".join(self.words) + ". "
            "Which word was " + self.ORDINALS[self.index] + " in the list? "
            "Answer with the word inside \\boxed{}."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().lower() == self.words[self.index]:
            return "Correct!", 1.0, True, False, {}
        return "Wrong, it was " + self.words[self.index] + ".", 0.0, True, False, {}

    def solution(self):
        return self.words[self.index]
