import random
import re


class ModDetectiveEnv:
    """Multi-turn: find a hidden number by asking for its remainders."""

    def __init__(self, max_turns=6, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.top = random.randint(40, 130)
        self.secret = random.randint(1, self.top)
        self.left = set(range(1, self.top + 1))
        self.turn_count = 0
        obs = (
            "I hide a whole number from 1 to " + str(self.top) + ". Ask \\boxed{mod k} "
            "(k from 2 to 12) to learn its remainder when divided by k, "
            "or guess with \\boxed{n}. "
            "You have " + str(self.max_turns) + " turns."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*(mod)?\s*(\d{1,6})\s*\}", action)
        if not m:
            return "Use \\boxed{mod k} or \\boxed{n}.", -0.1, False, truncated, {}
        n = int(m.group(2))
        if m.group(1) is None:
            if n == self.secret:
                return "Correct, the number is " + str(n) + "!", 1.0, True, False, {}
            self.left.discard(n)
            return "No, it is not " + str(n) + ".", 0.0, False, truncated, {}
        if not 2 <= n <= 12:
            return "k must be from 2 to 12.", 0.0, False, truncated, {}
        r = self.secret % n
        before = len(self.left)
        self.left = {c for c in self.left if c % n == r}
        reward = 0.1 * (before - len(self.left)) / self.top
        obs = "The remainder mod " + str(n) + " is " + str(r) + "."
        return obs, reward, False, truncated, {"remainder": r}

    def solution(self):
        return str(self.secret)
