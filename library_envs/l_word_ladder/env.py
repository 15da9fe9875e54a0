import random
import re

WORDS = ("cold cord card care core bore bare barn warn ward word wore more "
         "mare male pale pile pine fine fire hire hare dare date gate game "
         "came cane lane line").split()


class WordLadderEnv:
    """Multi-turn: walk from one word to another changing one letter per turn."""

    def __init__(self, max_turns=8, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.word = random.choice(WORDS)
        dist = self._dist(self.word)
        self.target = random.choice([w for w in WORDS if 3 <= dist[w] <= 5])
        self.turn_count = 0
        obs = (
            "Word ladder from '" + self.word + "' to '" + self.target + "'. Each "
            "turn write \\boxed{word}, a listed word that differs from the current "
            "one in exactly one letter. Words: " + " ".join(WORDS) + ". You have "
            + str(self.max_turns) + " turns."
        )
        return obs, {"target": self.target}

    def _near(self, a, b):
        return sum(x != y for x, y in zip(a, b)) == 1

    def _dist(self, start):
        dist, queue = {start: 0}, [start]
        for w in queue:
            for v in WORDS:
                if v not in dist and self._near(w, v):
                    dist[v] = dist[w] + 1
                    queue.append(v)
        return dist

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Write a word as \\boxed{word}.", -0.1, False, truncated, {}
        w = m.group(1).strip().lower()
        if w not in WORDS or not self._near(w, self.word):
            return "Bad step from " + self.word + ".", 0.0, False, truncated, {}
        self.word = w
        if w == self.target:
            return "You reached " + w + "!", 1.0, True, False, {}
        return "Now at " + w + ".", 0.05, False, truncated, {}

    def solution(self):
        dist = self._dist(self.target)
        path, w = [], self.word
        while w != self.target:
            w = [v for v in WORDS if self._near(w, v) and dist[v] == dist[w] - 1][0]
            path.append(w)
        return " ".join("\\boxed{" + v + "}" for v in path)
