import random
import re


class SlideTilesEnv:
    """Multi-turn: solve a 2x3 sliding tile puzzle by sliding tiles into the gap."""

    def __init__(self, max_turns=14, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.goal = (1, 2, 3, 4, 5, 0)
        self.tiles = self.goal
        while not 3 <= len(self._plan()) <= 10:
            for _ in range(12):
                self.tiles = random.choice(list(self._moves(self.tiles).values()))
        self.turn_count = 0
        return self._show("A 2x3 tray holds tiles 1-5 and a gap (_). Slide a tile beside "
                          "the gap into it with \\boxed{tile} until it reads 1 2 3 / 4 5 _."), {}

    def _show(self, msg):
        cells = [str(t) if t else "_" for t in self.tiles]
        return msg + " Tray: " + " ".join(cells[:3]) + " / " + " ".join(cells[3:])

    def _moves(self, state):
        gap, out = state.index(0), {}
        for cell in range(6):
            if abs(cell - gap) == 3 or abs(cell - gap) == 1 and cell // 3 == gap // 3:
                nxt = list(state)
                nxt[gap], nxt[cell] = nxt[cell], 0
                out[state[cell]] = tuple(nxt)
        return out

    def _plan(self):
        paths, queue = {self.tiles: []}, [self.tiles]
        for state in queue:
            if state == self.goal:
                return paths[state]
            for tile, nxt in self._moves(state).items():
                if nxt not in paths:
                    paths[nxt] = paths[state] + [tile]
                    queue.append(nxt)

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*(\d)\s*\}", action)
        if not m:
            return self._show("Use \\boxed{n}."), -0.1, False, truncated, {}
        moves = self._moves(self.tiles)
        if int(m.group(1)) not in moves:
            return self._show("Not beside the gap."), 0.0, False, truncated, {}
        self.tiles = moves[int(m.group(1))]
        if self.tiles == self.goal:
            return self._show("Solved!"), 1.0, True, False, {}
        return self._show("OK."), 0.1 / (1 + len(self._plan())), False, truncated, {}

    def solution(self):
        return " ".join("\\boxed{" + str(t) + "}" for t in self._plan())
