import random
import re


class ChainReactionEnv:
    """Single answer: follow switching rules to find which devices end up on."""

    DEVICES = ["pump", "fan", "heater", "valve", "alarm", "light", "motor", "siren"]

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        chain = random.sample(self.DEVICES, 6)
        state = {d: random.choice([True, False]) for d in chain}
        effects = [random.random() < 0.7 for _ in range(5)]
        rules = []
        for i in range(5):
            verb = "on" if effects[i] else "off"
            rules.append("When " + chain[i] + " is switched on, it switches "
                         + chain[i + 1] + " " + verb + ".")
        lines = [d + " is " + ("on" if state[d] else "off") for d in sorted(chain)]
        state[chain[0]] = True
        for i in range(5):
            state[chain[i + 1]] = effects[i]
            if not effects[i]:
                break
        self.answer = sorted(d for d in chain if state[d])
        random.shuffle(rules)
        self.turn_count = 0
        obs = (
            "Devices: " + ", ".join(lines) + ". Rules: " + " ".join(rules)
            + " A rule fires whenever its device is switched on, even if it was "
            "already on. You switch on " + chain[0] + ". Which devices are on "
            "afterwards? Answer with their names, comma-separated, inside \\boxed{}."
        )
        return obs, {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        given = {name.strip().lower() for name in m.group(1).split(",")}
        if given == set(self.answer):
            return "Correct!", 1.0, True, False, {}
        return "Wrong. On: " + ", ".join(self.answer) + ".", 0.0, True, False, {}

    def solution(self):
        return ", ".join(self.answer)
