import random
import re


class PrimeFactorsEnv:
    """Multi-turn: break a number down by naming one prime factor per turn."""

    def __init__(self, max_turns=8, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        count = random.randint(3, 5)
        self.factors = sorted(random.choice([2, 3, 5, 7, 11, 13]) for _ in range(count))
        self.number = 1
        for p in self.factors:
            self.number *= p
        self.left = self.number
        self.turn_count = 0
        obs = (
            "Factor " + str(self.number) + " into primes. Each turn name one prime "
            "factor of what is left as \\boxed{p}; it is divided out. Reach 1 within "
            + str(self.max_turns) + " turns."
        )
        return obs, {"number": self.number}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*(\d{1,9})\s*\}", action)
        if not m:
            return "Name a prime as \\boxed{p}.", -0.1, False, truncated, {}
        p = int(m.group(1))
        if p < 2 or self.left % p:
            obs = str(p) + " does not divide " + str(self.left) + "."
            return obs, 0.0, False, truncated, {}
        if any(p % d == 0 for d in range(2, int(p ** 0.5) + 1)):
            return str(p) + " is not prime.", 0.0, False, truncated, {}
        self.left //= p
        self.factors.remove(p)
        if self.left == 1:
            return "Fully factored!", 1.0, True, False, {}
        obs = "Yes. What is left: " + str(self.left) + "."
        return obs, 0.1, False, truncated, {"left": self.left}

    def solution(self):
        return " ".join("\\boxed{" + str(p) + "}" for p in self.factors)
