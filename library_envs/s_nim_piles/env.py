import random
import re


class NimPilesEnv:
    """Multi-turn: three-pile Nim against a fixed-rule opponent."""

    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.piles = [0, 0, 0]
        while self.piles[0] ^ self.piles[1] ^ self.piles[2] == 0:
            self.piles = [random.randint(1, 6) for _ in range(3)]
        self.total = sum(self.piles)
        self.turn_count = 0
        self.done = False
        rules = (
            "Nim: take stones from one pile with \\boxed{pile count} (\\boxed{2 3} takes 3 "
            "from pile 2); then I take one stone from the largest pile (leftmost if tied). "
            "Whoever takes the last stone wins."
        )
        return self._show(rules), {}

    def _show(self, msg):
        return msg + " Piles: " + str(self.piles)

    def _reply(self, piles):
        piles[piles.index(max(piles))] -= 1

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*(\d{1,3})\s+(\d{1,3})\s*\}", action)
        i, k = (int(m.group(1)) - 1, int(m.group(2))) if m else (-1, 0)
        if not (0 <= i < 3 and 1 <= k <= self.piles[i]):
            return self._show("Use \\boxed{pile count}."), -0.05, False, truncated, {}
        self.piles[i] -= k
        won = sum(self.piles) == 0
        if not won:
            self._reply(self.piles)
        if sum(self.piles) == 0:
            self.done = True
            return ("You win!" if won else "I took the last stone."), float(won), True, False, {}
        reward = 0.1 * (1 - sum(self.piles) / self.total)
        return self._show("I took one stone."), reward, False, truncated, {}

    def solution(self):
        piles, moves = list(self.piles), []
        while sum(piles) > 0:
            x = piles[0] ^ piles[1] ^ piles[2]
            i = next((j for j in range(3) if piles[j] ^ x < piles[j]), piles.index(max(piles)))
            k = piles[i] - (piles[i] ^ x) if x else 1
            moves.append("\\boxed{%d %d}" % (i + 1, k))
            piles[i] -= k
            if sum(piles) > 0:
                self._reply(piles)
        return " ".join(moves)
