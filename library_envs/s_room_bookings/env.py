import random
import re


class RoomBookingsEnv:
    """Single answer: the most meetings one room can host without overlaps."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.meetings = []
        for _ in range(random.randint(5, 8)):
            start = random.randint(8, 16)
            self.meetings.append((start, start + random.randint(1, 3)))
        self.answer, free = 0, 0
        for start, end in sorted(self.meetings, key=lambda m: m[1]):
            if start >= free:
                self.answer, free = self.answer + 1, end
        self.turn_count = 0
        listing = ", ".join(str(s) + ":00-" + str(e) + ":00" for s, e in self.meetings)
        obs = (
            "Requests to book the only meeting room today: " + listing + ". Meetings in the "
            "room may not overlap, but one may start at the hour another ends. What is the "
            "largest number of requests that can be accepted? Answer as \\boxed{n}."
        )
        return obs, {"meetings": self.meetings}

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
