import random
import re


class WaterJugsEnv:
    """Multi-turn: measure an exact amount of water with two jugs."""

    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        plan = []
        while not 3 <= len(plan) <= 8:
            self.caps = (random.randint(3, 6), random.randint(7, 11))
            self.jugs = (0, 0)
            self.target = random.randint(1, self.caps[1] - 1)
            plan = self._plan() or []
        self.turn_count = 0
        rules = (
            "Jugs hold %d and %d litres; get exactly %d litres in one. Moves such as "
            "\\boxed{fill 1}, \\boxed{empty 2}, \\boxed{pour 1 2} (until 1 is empty or 2 full)."
        )
        return self._show(rules % (self.caps + (self.target,))), {}

    def _show(self, msg):
        return msg + " Jugs: " + str(self.jugs)

    def _moves(self, state):
        (a, b), (ca, cb) = state, self.caps
        ab, ba = min(a, cb - b), min(b, ca - a)
        return {"fill 1": (ca, b), "fill 2": (a, cb), "empty 1": (0, b), "empty 2": (a, 0),
                "pour 1 2": (a - ab, b + ab), "pour 2 1": (a + ba, b - ba)}

    def _plan(self):
        paths, queue = {self.jugs: []}, [self.jugs]
        for state in queue:
            if self.target in state:
                return paths[state]
            for name, nxt in self._moves(state).items():
                if nxt not in paths:
                    paths[nxt] = paths[state] + [name]
                    queue.append(nxt)

    def step(self, action):
        if self.target in self.jugs:
            return "Game over.", 0.0, True, False, {}
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{([\w ]{1,20})\}", action)
        moves = self._moves(self.jugs)
        name = " ".join(m.group(1).lower().split()) if m else ""
        if name not in moves:
            return self._show("Bad move."), -0.05, False, truncated, {}
        self.jugs = moves[name]
        if self.target in self.jugs:
            return self._show("Measured!"), 1.0, True, False, {}
        return self._show("OK."), 0.1 / (1 + len(self._plan())), False, truncated, {}

    def solution(self):
        return " ".join("\\boxed{" + name + "}" for name in self._plan() or [])
