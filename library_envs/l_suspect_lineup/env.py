import itertools
import random
import re

NAMES = ["Alice", "Boris", "Clara", "Diego", "Emma", "Felix", "Greta", "Hugo"]
TRAITS = ["hat", "glasses", "beard", "scarf"]


class SuspectLineupEnv:
    """Multi-turn: ask yes/no questions about looks to find the culprit in a lineup."""

    def __init__(self, max_turns=6, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        looks = random.sample(list(itertools.product([0, 1], repeat=4)), 6)
        self.people = dict(zip(random.sample(NAMES, 6), looks))
        self.culprit = random.choice(sorted(self.people))
        lines = []
        for n in sorted(self.people):
            has = [t for t, v in zip(TRAITS, self.people[n]) if v]
            lines.append(n + ": " + (", ".join(has) if has else "nothing"))
        self.turn_count = 0
        obs = (
            "One of these suspects is the culprit. " + "; ".join(lines) + ". "
            "Ask \\boxed{hat}, \\boxed{glasses}, \\boxed{beard} or \\boxed{scarf} "
            "to learn if the culprit has it, or accuse with \\boxed{name}. A wrong "
            "accusation loses. You have " + str(self.max_turns) + " turns."
        )
        return obs, {"suspects": sorted(self.people)}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        word = m.group(1).strip().lower() if m else ""
        if word in TRAITS:
            yes = self.people[self.culprit][TRAITS.index(word)]
            obs = ("Yes, " if yes else "No, ") + "the culprit " + ("has" if yes else "has no") + " " + word + "."
            return obs, 0.0, False, truncated, {}
        names = [n for n in self.people if n.lower() == word]
        if not names:
            return "Ask a trait or name a suspect.", -0.1, False, truncated, {}
        if names[0] == self.culprit:
            return "Caught! It was " + self.culprit + ".", 1.0, True, False, {}
        return "Wrong. It was " + self.culprit + ".", 0.0, True, False, {}

    def solution(self):
        return "\\boxed{" + self.culprit + "}"
