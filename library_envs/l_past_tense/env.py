import random
import re

VERBS = {"go": "went", "swim": "swam", "eat": "ate", "write": "wrote",
         "bring": "brought", "think": "thought", "catch": "caught",
         "fly": "flew", "sing": "sang", "drive": "drove", "take": "took",
         "choose": "chose", "teach": "taught", "buy": "bought", "sit": "sat",
         "give": "gave", "speak": "spoke", "stop": "stopped",
         "carry": "carried", "plan": "planned", "try": "tried", "win": "won"}
WHO = ["I", "we", "my sister", "the children", "our neighbour", "Tom"]


class PastTenseEnv:
    """Single answer: put the verb of a sentence into the past tense."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        verb = random.choice(sorted(VERBS))
        self.answer = VERBS[verb]
        who = random.choice(WHO)
        self.turn_count = 0
        obs = (
            "Fill the gap with the past tense of the verb in brackets: "
            "'Yesterday " + who + " ___ (" + verb + ").' Spelling counts. "
            "Answer with the single word inside \\boxed{}."
        )
        return obs, {"verb": verb}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().lower() == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong. It is " + self.answer + ".", 0.0, True, False, {}

    def solution(self):
        return self.answer
