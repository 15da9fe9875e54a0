class LampsEnv:
    """Multi-turn: switch on every lamp, one \\boxed{N} toggle per turn. solution() describes the
    plan in words, as the contract allows for multi-turn envs; it cannot be played as given."""

    LAMPS = 6

    def __init__(self, max_turns=8):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        off = random.sample(range(1, self.LAMPS + 1), random.randint(3, 4))
        self.on = [i not in off for i in range(1, self.LAMPS + 1)]
        self.turn_count = 0
        return self._show("Switch on every lamp. Toggle lamp N with \\boxed{N}."), {}

    def _show(self, text):
        lamps = " ".join(("#" if lit else ".") for lit in self.on)
        return f"{text}\nLamps: {lamps}"

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        match = re.search(r"\\boxed\{(\d{1,3})\}", action)
        if not match or not 1 <= int(match.group(1)) <= self.LAMPS:
            return self._show(f"Use \\boxed{{N}} with N from 1 to {self.LAMPS}."), 0.0, False, truncated, {}
        n = int(match.group(1))
        self.on[n - 1] = not self.on[n - 1]
        if all(self.on):
            return self._show("All lamps are on!"), 1.0, True, False, {}
        return self._show(f"Toggled lamp {n}."), sum(self.on) / self.LAMPS / 10, False, truncated, {}

    def solution(self):
        return "Toggle each lamp that is off, one per turn, from left to right."
