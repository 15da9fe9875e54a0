import itertools
import random
import re

TEAMS = ["Lions", "Tigers", "Eagles", "Sharks", "Wolves", "Bears"]


class LeagueLeaderEnv:
    """Single answer: find which team tops a league table from match scores."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        while True:
            teams = random.sample(TEAMS, 4)
            points = {t: 0 for t in teams}
            results = []
            for a, b in itertools.combinations(teams, 2):
                x, y = random.randint(0, 3), random.randint(0, 3)
                results.append(a + " " + str(x) + "-" + str(y) + " " + b)
                if x == y:
                    points[a] += 1
                    points[b] += 1
                else:
                    points[a if x > y else b] += 3
            best = max(points.values())
            top = [t for t in teams if points[t] == best]
            if len(top) == 1:
                break
        random.shuffle(results)
        self.answer = top[0]
        self.turn_count = 0
        obs = (
            "League results: " + "; ".join(results) + ". A win earns 3 points, a "
            "draw 1 point each, a loss 0. Which team has the most points? "
            "Answer with the team inside \\boxed{}."
        )
        return obs, {"points": points}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().lower() == self.answer.lower():
            return "Correct!", 1.0, True, False, {}
        return "Wrong. The leaders are the " + self.answer + ".", 0.0, True, False, {}

    def solution(self):
        return self.answer
