import itertools
import random
import re


class LeverLightsEnv:
    """Multi-turn: discover which lights each lever toggles and turn every light on."""

    LEVERS = "ABCD"

    def __init__(self, max_turns=10, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.masks = dict(zip(self.LEVERS, random.sample(range(1, 32), 4)))
        self.lights = 31
        while self.lights == 31:
            for lever in random.sample(self.LEVERS, random.randint(1, 4)):
                self.lights ^= self.masks[lever]
        self.plan = min(
            (c for k in range(1, 5) for c in itertools.combinations(self.LEVERS, k)
             if self._pull_all(c) == 31),
            key=len,
        )
        self.turn_count = 0
        obs = (
            "Five lights and four levers A-D. Each lever toggles a hidden, fixed set of "
            "lights. Turn every light on. Pull one lever per turn as \\boxed{A}. "
            + self._show()
        )
        return obs, {}

    def _pull_all(self, levers):
        lights = self.lights
        for lever in levers:
            lights ^= self.masks[lever]
        return lights

    def _show(self):
        states = ["on" if self.lights >> i & 1 else "off" for i in range(5)]
        return "Lights 1-5: " + " ".join(states) + "."

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        lever = m.group(1).strip().upper() if m else ""
        if lever not in self.masks:
            return "Pull a lever A-D as \\boxed{A}.", -0.1, False, truncated, {}
        self.lights ^= self.masks[lever]
        if self.lights == 31:
            return "All lights are on. You win!", 1.0, True, False, {}
        return "Lever " + lever + " pulled. " + self._show(), 0.0, False, truncated, {}

    def solution(self):
        return " ".join("\\boxed{" + lever + "}" for lever in self.plan)
