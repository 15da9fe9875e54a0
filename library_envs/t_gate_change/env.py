import random
import re


class GateChangeEnv:
    """Single answer: follow a run of gate-change announcements to a flight's final gate."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        flights = random.sample(["BA", "LH", "AF", "KL", "IB", "AZ"], 4)
        flights = [f + str(random.randint(10, 99)) for f in flights]
        gates = ["A1", "A4", "B2", "B7", "C3", "C5", "D6", "D8"]
        self.gate = {f: random.choice(gates) for f in flights}
        lines = [f + " boards at gate " + self.gate[f] for f in flights]
        for _ in range(random.randint(4, 6)):
            f = random.choice(flights)
            self.gate[f] = random.choice([g for g in gates if g != self.gate[f]])
            lines.append("Gate change: " + f + " now boards at gate " + self.gate[f])
        self.flight = random.choice(flights)
        self.turn_count = 0
        obs = (
            "Departure announcements, in order:\n" + "\n".join(lines)
            + "\nAt which gate does " + self.flight + " board now? "
            "Answer inside \\boxed{}, like \\boxed{A1}."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer a gate inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().upper() == self.gate[self.flight]:
            return "Correct!", 1.0, True, False, {}
        return "Wrong, it was " + self.gate[self.flight] + ".", 0.0, True, False, {}

    def solution(self):
        return self.gate[self.flight]
