import random
import re

NOUNS = ["tama", "belok", "sirun", "pavet", "gomi", "darup", "kelo",
         "mirat", "fosun", "lipe", "zorak", "nubel", "hasut", "vemo"]
ENDINGS = ["ka", "ol", "im", "ur", "es", "an", "ith"]


class PluralRulesEnv:
    """Single answer: form a plural in a made-up language from stated rules."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        vowel, stop, other = random.sample(ENDINGS, 3)
        noun = random.choice(NOUNS)
        if noun[-1] in "aeiou":
            self.answer = noun + vowel
        elif noun[-1] in "tk":
            self.answer = noun[:-1] + stop
        else:
            self.answer = noun + other
        self.turn_count = 0
        obs = (
            "In the Velan language, plurals follow three rules. "
            "A noun ending in a vowel adds '" + vowel + "'. "
            "A noun ending in t or k drops that letter and adds '" + stop + "'. "
            "Any other noun adds '" + other + "'. "
            "What is the plural of '" + noun + "'? Answer inside \\boxed{}."
        )
        return obs, {"noun": noun}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().lower() == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong. The plural is " + self.answer + ".", 0.0, True, False, {}

    def solution(self):
        return self.answer
