import random
import re


class ReachTargetEnv:
    """Multi-turn: reach a target number exactly with add and multiply moves."""

    def __init__(self, max_turns=8, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.add, self.mul = random.randint(1, 5), random.randint(2, 3)
        self.value = self.target = random.randint(1, 6)
        for _ in range(random.randint(3, 5)):
            if random.random() < 0.5:
                self.target += self.add
            else:
                self.target *= self.mul
        self.turn_count = 0
        self.done = False
        obs = (
            "The number is " + str(self.value) + ". Each turn, \\boxed{+} adds " + str(self.add)
            + " and \\boxed{*} multiplies by " + str(self.mul) + ". Make it exactly "
            + str(self.target) + " within " + str(self.max_turns) + " moves; going past it loses."
        )
        return obs, {"target": self.target}

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*([+*])\s*\}", action)
        if not m:
            return "Move with \\boxed{+} or \\boxed{*}.", -0.05, False, truncated, {}
        self.value = self.value + self.add if m.group(1) == "+" else self.value * self.mul
        if self.value == self.target:
            self.done = True
            return "You reached " + str(self.target) + "!", 1.0, True, False, {}
        if self.value > self.target:
            self.done = True
            return "You went past " + str(self.target) + ".", 0.0, True, False, {}
        obs = "The number is " + str(self.value) + "; the target is " + str(self.target) + "."
        return obs, 0.1 * self.value / self.target, False, truncated, {}

    def solution(self):
        paths, queue = {self.value: ""}, [self.value]
        for v in queue:
            for op, nxt in (("+", v + self.add), ("*", v * self.mul)):
                if nxt <= self.target and nxt not in paths:
                    paths[nxt] = paths[v] + " \\boxed{" + op + "}"
                    queue.append(nxt)
        return paths.get(self.target, "").strip()
