import random
import re


class FuseHuntEnv:
    """Multi-turn: plug in groups of appliances to find the one that trips the fuse."""

    NAMES = ["kettle", "toaster", "lamp", "fan", "radio", "iron", "heater", "mixer", "drill"]

    def __init__(self, max_turns=5, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.names = random.sample(self.NAMES, 8)
        self.culprit = random.choice(self.names)
        self.turn_count = 0
        self.tests = 0
        obs = (
            "One of these appliances trips the fuse whenever it is plugged in: "
            + ", ".join(self.names) + ". Test a group with \\boxed{test lamp fan} to see "
            "if the fuse trips; after at least one test, name the culprit with "
            "\\boxed{answer name}. You have " + str(self.max_turns) + " turns."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*(test|answer)\s+([a-z ]+?)\s*\}", action)
        if not m:
            obs = "Use \\boxed{test name name} or \\boxed{answer name}."
            return obs, -0.1, False, truncated, {}
        group = m.group(2).split()
        if m.group(1) == "test":
            self.tests += 1
            obs = "The fuse " + ("trips." if self.culprit in group else "holds.")
            return obs, 0.0, False, truncated, {}
        if self.tests == 0 or len(group) != 1:
            obs = "Test at least once, then name one appliance."
            return obs, -0.1, False, truncated, {}
        if group[0] == self.culprit:
            return "Found it!", 1.0, True, False, {}
        return "Wrong, it was the " + self.culprit + ".", 0.0, True, False, {}

    def solution(self):
        return "\\boxed{test " + self.culprit + "} \\boxed{answer " + self.culprit + "}"
