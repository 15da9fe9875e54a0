import itertools
import random
import re

NAMES = ["Ann", "Bo", "Cal"]


class KnightsKnavesEnv:
    """Single answer: find which of three speakers are truthful knights."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def _say(self, s):
        o = random.choice([i for i in range(3) if i != s])
        n = NAMES[o]
        return random.choice([
            (n + " is a knight.", lambda a: a[o]),
            (n + " is a knave.", lambda a: not a[o]),
            (n + " and I are the same kind.", lambda a: a[o] == a[s]),
            (n + " and I are different kinds.", lambda a: a[o] != a[s]),
            ("At least one of us is a knave.", lambda a: not all(a)),
            ("Exactly one of us is a knight.", lambda a: sum(a) == 1),
        ])

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        while True:
            says = [self._say(s) for s in range(3)]
            worlds = [a for a in itertools.product([True, False], repeat=3)
                      if all(f(a) == a[i] for i, (_, f) in enumerate(says))]
            if len(worlds) == 1:
                break
        self.knights = [n for n, k in zip(NAMES, worlds[0]) if k]
        self.turn_count = 0
        lines = [n + " says: \"" + t + "\"" for n, (t, _) in zip(NAMES, says)]
        obs = (
            "Each of Ann, Bo and Cal is a knight (always truthful) or a knave "
            "(always lies).\n" + "\n".join(lines) + "\nWho are the knights? "
            "Answer like \\boxed{Ann, Cal}, or \\boxed{none}."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        names = set(re.findall(r"[a-z]+", m.group(1).lower())) - {"none", "and"}
        if names == {n.lower() for n in self.knights}:
            return "Correct!", 1.0, True, False, {}
        return "Wrong. The knights: " + self.solution() + ".", 0.0, True, False, {}

    def solution(self):
        return ", ".join(self.knights) or "none"
