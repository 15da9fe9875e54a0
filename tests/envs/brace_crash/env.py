import random
import re


class TemplateFillEnv:
    """Fill a word into a sentence template. Planted bug: an action containing '{{' is read as a
    template variable and looked up without a default, which raises KeyError."""

    WORDS = ["cat", "tree", "river", "lamp", "cloud"]

    def __init__(self, max_turns=4):
        self.max_turns = max_turns
        self.variables = {"x": "1"}
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.word = random.choice(self.WORDS)
        self.turn_count = 0
        return f"The missing word rhymes with '{self.word[1:]}' and starts with '{self.word[0]}'. Answer in \\boxed{{}}.", {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        if "{{" in action:
            name = action.split("{{", 1)[1].split("}}", 1)[0]
            action = action.replace("{{" + name + "}}", self.variables[name])  # the bug
        match = re.search(r"\\boxed\{(.+?)\}", action)
        if not match:
            return "Answer in \\boxed{}.", -0.1, False, truncated, {}
        if match.group(1).strip().lower() == self.word:
            return "Correct!", 1.0, True, False, {}
        return "Not that word.", 0.0, False, truncated, {}

    def solution(self):
        return self.word
