import random
import re


class MirrorClockEnv:
    """Single answer: the real time shown by a clock seen in a mirror."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.seen = random.randint(1, 719)
        self.answer = (720 - self.seen) % 720
        self.turn_count = 0
        obs = (
            "An analog clock without numbers hangs behind you. In a mirror it seems to show "
            + self._text(self.seen) + ". What time does the clock really show? "
            "Answer as \\boxed{H:MM} with H from 1 to 12."
        )
        return obs, {"seen": self._text(self.seen)}

    def _text(self, t):
        h, m = t // 60 or 12, t % 60
        return str(h) + ":" + str(m).zfill(2)

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        t = re.fullmatch(r"\s*(\d{1,2}):(\d{2})\s*", m.group(1))
        if not t:
            return "Write the time as H:MM.", 0.0, False, truncated, {}
        value = (int(t.group(1)) * 60 + int(t.group(2))) % 720
        if value == self.answer and int(t.group(2)) < 60:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return self._text(self.answer)
