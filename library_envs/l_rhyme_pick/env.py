import random
import re

FAMILIES = [["cat", "hat", "mat", "bat"], ["cake", "lake", "snake", "rake"],
            ["night", "light", "kite", "bite"], ["moon", "spoon", "noon", "soon"],
            ["bell", "shell", "well", "smell"], ["rain", "train", "chain", "plane"],
            ["boat", "coat", "goat", "note"], ["tree", "bee", "key", "sea"],
            ["ring", "king", "sing", "wing"], ["bear", "chair", "pear", "hair"],
            ["sock", "clock", "rock", "lock"], ["fish", "dish", "wish"]]


class RhymePickEnv:
    """Single answer: pick the option that rhymes with a given word."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        groups = random.sample(FAMILIES, 4)
        self.word, self.answer = random.sample(groups[0], 2)
        options = [self.answer] + [random.choice(g) for g in groups[1:]]
        random.shuffle(options)
        self.turn_count = 0
        obs = (
            "Which of these words rhymes with '" + self.word + "'? Options: "
            + ", ".join(options) + ". Answer with the word inside \\boxed{}."
        )
        return obs, {"options": options}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().lower() == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong. The rhyme was " + self.answer + ".", 0.0, True, False, {}

    def solution(self):
        return self.answer
