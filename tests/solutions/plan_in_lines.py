class StairsPlanEnv:
    """Multi-turn: climb to exactly the target step, 1 to 3 steps per turn as \\boxed{k}.
    No single action ends an episode, so the env is multi-turn by its behaviour. solution()
    describes the plan in words over several lines: it cannot be played as given."""

    def __init__(self, max_turns=12):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.target = rng.randint(10, 20)
        self.at = 0
        self.turn_count = 0
        return (
            f"Climb to step {self.target} exactly. Each turn climb 1 to 3 steps: \\boxed{{k}}.",
            {},
        )

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        match = re.search(r"\\boxed\{(\d{1,3})\}", action)
        if not match or not 1 <= int(match.group(1)) <= 3:
            return f"Climb 1 to 3 steps: \\boxed{{k}}. You are on step {self.at}.", 0.0, False, truncated, {}
        self.at += int(match.group(1))
        if self.at == self.target:
            return "You reached the target!", 1.0, True, False, {}
        if self.at > self.target:
            return "You climbed past the target.", 0.0, True, False, {}
        return f"You are on step {self.at} of {self.target}.", 0.0, False, truncated, {}

    def solution(self):
        return (
            "Climb 3 steps per turn\n"
            f"until fewer than 3 of the {self.target} remain,\n"
            "then climb the rest."
        )
