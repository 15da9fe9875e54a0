class LinearFunctionEnv:
    """Single answer, code: write a Python function. The answer is code over several lines, in a
    ```python fenced block or bare; it is run on test inputs."""

    def __init__(self, max_turns=3):
        self.max_turns = max_turns
        self.turn_count = 0

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.a, self.b = rng.randint(2, 9), rng.randint(1, 20)
        self.turn_count = 0
        return (
            f"Write a Python function f(x) that returns {self.a} * x + {self.b} for an integer x, "
            "and answer with its code in a ```python block."
        ), {}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        fenced = re.search(r"```(?:python)?[ \t]*\n(.*?)```", action, re.DOTALL)
        code = fenced.group(1) if fenced else action
        namespace = {}
        try:
            exec(code, namespace)
            passed = all(namespace["f"](x) == self.a * x + self.b for x in (-3, 0, 1, 7))
        except Exception as exc:
            return f"Your code failed: {type(exc).__name__}.", 0.0, False, truncated, {}
        if passed:
            return "All tests pass.", 1.0, True, False, {}
        return "Wrong result on a test input.", 0.0, False, truncated, {}

    def solution(self):
        return f"```python\ndef f(x):\n    y = {self.a} * x\n    return y + {self.b}\n```"
