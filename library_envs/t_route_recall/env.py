import random
import re


class RouteRecallEnv:
    """Multi-turn: walk a memorised route back home, giving each turn in reverse."""

    PLACES = ["bakery", "bank", "church", "library", "park", "school", "market", "museum"]
    BACK = {"left": "right", "right": "left", "straight": "straight"}

    def __init__(self, max_turns=8, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.places = random.sample(self.PLACES, random.randint(3, 5))
        self.turns = [random.choice(["left", "right", "straight"]) for _ in self.places]
        self.pos = len(self.places) - 1
        self.turn_count = 0
        route = ", ".join("at the " + p + " go " + t for p, t in zip(self.places, self.turns))
        obs = (
            "Your route to work: " + route + ". Now walk home the same way, in reverse. "
            "At each place answer \\boxed{left}, \\boxed{right} or \\boxed{straight}. "
            "A wrong way ends the game. You reach the " + self.places[self.pos] + "."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer \\boxed{left}, \\boxed{right} or \\boxed{straight}.", -0.1, False, truncated, {}
        if m.group(1).strip().lower() != self.BACK[self.turns[self.pos]]:
            return "Wrong way. Game over.", 0.0, True, False, {}
        self.pos -= 1
        if self.pos < 0:
            return "Home safely!", 1.0, True, False, {}
        obs = "Right. You reach the " + self.places[self.pos] + "."
        return obs, 0.1, False, truncated, {}

    def solution(self):
        return " ".join("\\boxed{" + self.BACK[t] + "}" for t in reversed(self.turns))
