import random
import re


class PantryBatchesEnv:
    """Single answer: how many whole batches of a recipe the pantry stock allows."""

    FOODS = ["flour", "sugar", "butter", "oats", "cocoa", "raisins", "honey", "nuts"]

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        foods = random.sample(self.FOODS, 4)
        need = {f: random.choice([40, 60, 80, 100, 150, 200]) for f in foods}
        have = {f: need[f] * random.randint(2, 9) + random.randint(0, need[f] - 1)
                for f in foods}
        self.answer = min(have[f] // need[f] for f in foods)
        recipe = ", ".join(str(need[f]) + " g " + f for f in foods)
        stock = ", ".join(str(have[f]) + " g " + f for f in foods)
        self.turn_count = 0
        obs = (
            "One batch of cookies takes " + recipe + ". The pantry holds " + stock
            + ". How many whole batches can be baked? Answer with the number inside \\boxed{}."
        )
        return obs, {"need": need, "have": have}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        try:
            value = int(m.group(1).strip())
        except ValueError:
            return "The answer must be an integer.", 0.0, False, truncated, {}
        if value == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong. It was " + str(self.answer) + ".", 0.0, True, False, {}

    def solution(self):
        return str(self.answer)
