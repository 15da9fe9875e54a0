import random
import re


class BookletPagesEnv:
    """Multi-turn: name the page printed beside each asked page of a folded booklet."""

    def __init__(self, max_turns=5, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.pages = 4 * random.randint(3, 12)
        self.asked = random.sample(range(3, self.pages - 1), 3)
        self.turn_count = 0
        obs = (
            "A booklet of " + str(self.pages) + " pages is made of sheets folded in half "
            "and nested. Page 1 is printed beside page " + str(self.pages) + ", and page 2 "
            "beside page " + str(self.pages - 1) + ". Which page is printed beside page "
            + str(self.asked[0]) + "? Answer each question as \\boxed{n}."
        )
        return obs, {"pages": self.pages}

    def step(self, action):
        if not self.asked:
            return "All questions are answered.", 0.0, True, False, {}
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{\s*(\d{1,4})\s*\}", action)
        if not m:
            return "Answer as \\boxed{n}.", -0.1, False, truncated, {}
        if int(m.group(1)) != self.pages + 1 - self.asked[0]:
            return "No. Try again for page " + str(self.asked[0]) + ".", 0.0, False, truncated, {}
        self.asked.pop(0)
        if not self.asked:
            return "Correct, all pages matched!", 1.0, True, False, {}
        obs = "Right. Which page is printed beside page " + str(self.asked[0]) + "?"
        return obs, 0.2, False, truncated, {}

    def solution(self):
        return " ".join("\\boxed{" + str(self.pages + 1 - p) + "}" for p in self.asked)
