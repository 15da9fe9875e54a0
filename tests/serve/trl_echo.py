"""A one-turn game for the TRL test: any reply with a \\boxed{} answer scores 0.75, any other
reply 0.25, and the episode ends. The values are chosen so that a reward TRL logs can only have
come from this environment."""

import random


class TrlEchoEnv:
    def __init__(self, max_turns=1):
        self.max_turns = max_turns
        self.word = ""

    def reset(self, seed=None):
        self.word = random.Random(seed).choice(["apple", "river", "stone", "cloud"])
        return f"Say the word {self.word} in \\boxed{{}} through the reply tool.", {"word": self.word}

    def step(self, action):
        reward = 0.75 if "\\boxed{" in action else 0.25
        return "Thanks.", reward, True, False, {"boxed": reward == 0.75}

    def solution(self):
        return f"\\boxed{{{self.word}}}"

    def close(self):
        pass
