"""A well-behaved guessing game (it passes `spade check`) with one hostile action: the exact
reply "EAT MEMORY" allocates 1 MiB at a time, writing every page, until the sandbox can grow no
more. Used by the serve tests to run one session into the server's memory budget while other
sessions go on."""


class MemoryHogEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns
        self.target = 0
        self.turns = 0
        self.eaten = []

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.high = rng.randint(10, 99)
        self.target = rng.randint(1, self.high)
        self.turns = 0
        return f"Guess a number from 1 to {self.high}. Answer in \\boxed{{}}.", {"turns_left": self.max_turns}

    def step(self, action):
        if action == "EAT MEMORY":
            while True:
                chunk = bytearray(1 << 20)
                chunk[::4096] = b"x" * 256
                self.eaten.append(chunk)
        self.turns += 1
        match = re.search(r"\\boxed\{\s*(-?\d{1,6})\s*\}", action)
        if match and int(match.group(1)) == self.target:
            return "Correct.", 1.0, True, False, {"turns": self.turns}
        hint = "no number found" if not match else ("higher" if int(match.group(1)) < self.target else "lower")
        truncated = self.turns >= self.max_turns
        return f"Wrong ({hint}).", 0.0, False, truncated, {"turns": self.turns}

    def solution(self):
        return f"\\boxed{{{self.target}}}"
