import random
import re


class LampSwitchesEnv:
    """Multi-turn: press switches that flip sets of lamps until every lamp is on."""

    N = 5
    ALL_ON = (1 << N) - 1

    def __init__(self, max_turns=8, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.groups = [sorted(random.sample(range(self.N), random.randint(2, 3)))
                       for _ in range(self.N)]
        self.switches = [sum(1 << j for j in g) for g in self.groups]
        self.lamps = self.ALL_ON
        while self.lamps == self.ALL_ON:
            for s in random.sample(range(self.N), random.randint(2, 3)):
                self.lamps ^= self.switches[s]
        self.turn_count = 0
        self.done = False
        lines = ["switch " + str(i + 1) + " flips lamps " + ", ".join(str(j + 1) for j in g)
                 for i, g in enumerate(self.groups)]
        rules = "Turn all lamps on. Press a switch with \\boxed{k}; " + "; ".join(lines) + "."
        return self._show(rules), {}

    def _show(self, msg):
        states = ["on" if (self.lamps >> j) & 1 else "off" for j in range(self.N)]
        return msg + " Lamps 1-" + str(self.N) + ": " + " ".join(states)

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {}
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*([1-5])\s*\}", action)
        if not m:
            return self._show("Press a switch 1-5 as \\boxed{k}."), -0.05, False, truncated, {}
        self.lamps ^= self.switches[int(m.group(1)) - 1]
        if self.lamps == self.ALL_ON:
            self.done = True
            return "All lamps are on. You win!", 1.0, True, False, {}
        reward = 0.1 * bin(self.lamps).count("1") / self.N
        return self._show("Pressed."), reward, False, truncated, {}

    def solution(self):
        for mask in sorted(range(1 << self.N), key=lambda x: bin(x).count("1")):
            chosen = [s for s in range(self.N) if (mask >> s) & 1]
            lamps = self.lamps
            for s in chosen:
                lamps ^= self.switches[s]
            if lamps == self.ALL_ON:
                return " ".join("\\boxed{%d}" % (s + 1) for s in chosen)
        return ""
