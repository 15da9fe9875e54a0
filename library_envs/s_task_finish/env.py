import random
import re


class TaskFinishEnv:
    """Single answer: the earliest time a project of dependent tasks can finish."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        names = "ABCDEF"
        finish = {}
        lines = []
        for i, name in enumerate(names):
            hours = random.randint(1, 9)
            needs = sorted(random.sample(names[:i], random.randint(0, min(i, 2))))
            finish[name] = hours + max((finish[n] for n in needs), default=0)
            after = " after " + " and ".join(needs) if needs else " (can start at once)"
            unit = " hour" if hours == 1 else " hours"
            lines.append("- " + name + ": " + str(hours) + unit + after)
        self.answer = max(finish.values())
        self.turn_count = 0
        obs = (
            "A project has six tasks. A task starts only when all tasks it comes after are done; "
            "any number of tasks can run at the same time.\n" + "\n".join(lines)
            + "\nWhat is the earliest time (in hours) all tasks can be done? Answer as \\boxed{n}."
        )
        return obs, {"tasks": len(names)}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        try:
            value = int(m.group(1).strip())
        except ValueError:
            return "The answer must be a whole number.", 0.0, False, truncated, {}
        if value == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong.", 0.0, True, False, {}

    def solution(self):
        return str(self.answer)
