import random
import re


class DiskTowerEnv:
    """Multi-turn: stack scattered disks on one peg, never larger on smaller."""

    def __init__(self, max_turns=20, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        plan = []
        while not 2 <= len(plan) <= 15:
            self.where = tuple(random.randint(1, 3) for _ in range(4))
            self.goal = random.randint(1, 3)
            self.done = (self.goal,) * 4
            plan = self._plan()
        self.turn_count = 0
        return self._show("Disks 1 (small) to 4 (large) sit on pegs 1-3. \\boxed{a b} moves "
                          "peg a's top disk onto peg b, never onto a smaller one. Stack "
                          "all on peg " + str(self.goal) + "."), {}

    def _show(self, msg):
        pegs = [[d for d in (4, 3, 2, 1) if self.where[d - 1] == p] for p in (1, 2, 3)]
        return msg + " Pegs, bottom to top: " + str(pegs)

    def _moves(self, state):
        out = {}
        for a in set(state):
            top = state.index(a)
            for b in {1, 2, 3} - set(state[:top + 1]):
                out[str(a) + " " + str(b)] = state[:top] + (b,) + state[top + 1:]
        return out

    def _plan(self):
        paths, queue = {self.where: []}, [self.where]
        for state in queue:
            if state == self.done:
                return paths[state]
            for name, nxt in self._moves(state).items():
                if nxt not in paths:
                    paths[nxt] = paths[state] + [name]
                    queue.append(nxt)

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*(\d)\s+(\d)\s*\}", action)
        if not m:
            return self._show("Use \\boxed{a b}."), -0.1, False, truncated, {}
        nxt = self._moves(self.where).get(m.group(1) + " " + m.group(2))
        if not nxt:
            return self._show("Illegal."), 0.0, False, truncated, {}
        self.where = nxt
        if self.where == self.done:
            return self._show("Built!"), 1.0, True, False, {}
        return self._show("OK."), 0.1 / (1 + len(self._plan())), False, truncated, {}

    def solution(self):
        return " ".join("\\boxed{" + name + "}" for name in self._plan())
