import random
import re


class LampSwitchEnv:
    """Single answer: find which switch controls a lamp from a table of experiments."""

    SWITCHES = "ABCDEF"

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.answer = random.choice(self.SWITCHES)
        inverted = random.random() < 0.5
        rows, suspects = [], [(s, p) for s in self.SWITCHES for p in (False, True)]
        while len(suspects) > 1:
            on = {s: random.random() < 0.5 for s in self.SWITCHES}
            lamp = on[self.answer] != inverted
            left = [(s, p) for s, p in suspects if (on[s] != p) == lamp]
            if len(left) == len(suspects):
                continue
            suspects = left
            on_names = [s for s in self.SWITCHES if on[s]] or ["none"]
            rows.append("switches on: " + " ".join(on_names).ljust(11)
                        + " -> lamp " + ("on" if lamp else "off"))
        self.turn_count = 0
        obs = (
            "The lamp is controlled by exactly one of the switches A-F: it is either on "
            "exactly when that switch is on, or exactly when it is off. Experiments:\n"
            + "\n".join(rows)
            + "\nWhich switch controls the lamp? Answer with its letter inside \\boxed{}."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().upper() == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong, it was " + self.answer + ".", 0.0, True, False, {}

    def solution(self):
        return self.answer
