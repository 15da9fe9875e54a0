"""A single-answer product whose prompt is a string given to `.format` with a literal
`\\boxed{answer}` in it: the call passes no `answer`, so every reset raises KeyError. The
automatic fixes double those braces, and the fixed env passes `spade check`."""


class ProductEnv:
    def __init__(self, max_turns=1):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.a, self.b = rng.randint(2, 12), rng.randint(2, 12)
        return "What is {a} times {b}? Reply as \\boxed{answer}.".format(a=self.a, b=self.b), {}

    def step(self, action):
        match = re.search(r"\\boxed\{(-?\d{1,6})\}", action)
        if match and int(match.group(1)) == self.a * self.b:
            return "Correct!", 1.0, True, False, {}
        return "Wrong: the product is {}.".format(self.a * self.b), 0.0, True, False, {}

    def solution(self):
        return "\\boxed{{{}}}".format(self.a * self.b)
