import random
import re

PLAYS = {"touchdown": 6, "field goal": 3, "extra point": 1, "safety": 2, "two-point try": 2}


class RunningScoreEnv:
    """Multi-turn: keep a football team's running score as plays are announced."""

    def __init__(self, max_turns=6, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.score = random.randint(0, 21)
        self.plays = [random.choice(sorted(PLAYS)) for _ in range(random.randint(3, 5))]
        self.turn_count = 0
        obs = (
            "Points: " + ", ".join(k + " " + str(v) for k, v in PLAYS.items())
            + ". Our team has " + str(self.score) + " points. After each play, give "
            "the new score as \\boxed{n}. Play: " + self.plays[0] + "."
        )
        return obs, {"score": self.score}

    def step(self, action):
        if not self.plays:
            return "The game is over.", 0.0, True, False, {}
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*(\d{1,6})\s*\}", action)
        if not m:
            return "Give the score as \\boxed{n}.", -0.1, False, truncated, {}
        right = self.score + PLAYS[self.plays[0]]
        if int(m.group(1)) != right:
            return "Wrong, the score is " + str(right) + ".", 0.0, True, False, {}
        self.score = right
        self.plays.pop(0)
        if not self.plays:
            return "Correct, final score " + str(right) + "!", 1.0, True, False, {}
        obs = "Right. Next play: " + self.plays[0] + "."
        return obs, 0.1, False, truncated, {"score": right}

    def solution(self):
        out, total = [], self.score
        for play in self.plays:
            total += PLAYS[play]
            out.append("\\boxed{" + str(total) + "}")
        return " ".join(out)
