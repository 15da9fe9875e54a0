import random
from collections import deque


class GridWalkEnv:
    """Multi-turn game: walk to the goal on a grid with walls. Partial reward for progress."""

    MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}

    def __init__(self, max_turns=20, size=5):
        self.max_turns = max_turns
        self.size = size
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        n = self.size
        while True:
            self.walls = {(random.randrange(n), random.randrange(n)) for _ in range(n)}
            self.pos = (0, 0)
            self.goal = (n - 1, n - 1)
            self.walls.discard(self.pos)
            self.walls.discard(self.goal)
            if self._distance(self.pos) is not None:
                break
        self.turn_count = 0
        self.best = self._distance(self.pos)
        return self._render("Reach G from P. Move with \\boxed{up|down|left|right}."), {"distance": self.best}

    def _distance(self, start):
        seen, queue = {start: 0}, deque([start])
        while queue:
            cell = queue.popleft()
            if cell == self.goal:
                return seen[cell]
            for dr, dc in self.MOVES.values():
                nxt = (cell[0] + dr, cell[1] + dc)
                if 0 <= nxt[0] < self.size and 0 <= nxt[1] < self.size and nxt not in self.walls and nxt not in seen:
                    seen[nxt] = seen[cell] + 1
                    queue.append(nxt)
        return None

    def _render(self, header):
        rows = []
        for r in range(self.size):
            row = ""
            for c in range(self.size):
                cell = (r, c)
                row += "P" if cell == self.pos else "G" if cell == self.goal else "#" if cell in self.walls else "."
            rows.append(row)
        return header + "\n" + "\n".join(rows)

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        match = re.search(r"\\boxed\{(\w+)\}", action)
        if not match or match.group(1).lower() not in self.MOVES:
            return self._render("Invalid move."), -0.05, False, truncated, {"moved": False}
        dr, dc = self.MOVES[match.group(1).lower()]
        nxt = (self.pos[0] + dr, self.pos[1] + dc)
        if not (0 <= nxt[0] < self.size and 0 <= nxt[1] < self.size) or nxt in self.walls:
            return self._render("Blocked."), 0.0, False, truncated, {"moved": False}
        self.pos = nxt
        if self.pos == self.goal:
            return self._render("You reached the goal!"), 1.0, True, False, {"moved": True}
        distance = self._distance(self.pos)
        reward = 0.1 if distance < self.best else 0.0
        self.best = min(self.best, distance)
        return self._render(f"Moved. Distance to goal: {distance}."), reward, False, truncated, {"moved": True, "distance": distance}

    def solution(self):
        path, cell = [], self.pos
        while cell != self.goal:
            for name, (dr, dc) in self.MOVES.items():
                nxt = (cell[0] + dr, cell[1] + dc)
                d = self._distance(nxt) if 0 <= nxt[0] < self.size and 0 <= nxt[1] < self.size and nxt not in self.walls else None
                if d is not None and d < self._distance(cell):
                    path.append(f"\\boxed{{{name}}}")
                    cell = nxt
                    break
        return " ".join(path)
