import random
import re


class TheatreSeatEnv:
    """Single answer: find a friend's theatre seat from directions relative to yours."""

    ROWS = "ABCDEFGH"

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        row, seat = random.randint(0, 7), random.randint(1, 12)
        to_row, to_seat = random.randint(0, 7), random.randint(1, 12)
        while (to_row, to_seat) == (row, seat):
            to_seat = random.randint(1, 12)
        dr, ds = to_row - row, to_seat - seat
        parts = []
        if dr:
            where = " behind you" if dr > 0 else " in front of you"
            parts.append(str(abs(dr)) + (" rows" if abs(dr) > 1 else " row") + where)
        if ds:
            where = " to the right" if ds > 0 else " to the left"
            parts.append(str(abs(ds)) + (" seats" if abs(ds) > 1 else " seat") + where)
        self.answer = self.ROWS[to_row] + str(to_seat)
        self.turn_count = 0
        obs = (
            "Theatre rows run A (front) to H (back); seats run 1 to 12 from left to "
            "right as you face the stage. You sit in " + self.ROWS[row] + str(seat)
            + ". Your friend sits " + " and ".join(parts) + ". Which seat is your "
            "friend's? Answer like \\boxed{D7}."
        )
        return obs, {"seat": self.ROWS[row] + str(seat)}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).replace(" ", "").upper() == self.answer:
            return "Correct!", 1.0, True, False, {}
        return "Wrong. It was " + self.answer + ".", 0.0, True, False, {}

    def solution(self):
        return self.answer
