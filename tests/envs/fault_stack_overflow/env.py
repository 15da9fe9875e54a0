class DeepEnv:
    """Compiling a million nested unary minuses recurses in the interpreter's own (Rust) code,
    past Python's recursion limit checks, until the WebAssembly stack is exhausted."""

    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        value = eval("-" * 1000000 + "1")
        return str(value), 0.0, False, False, {}

    def solution(self):
        return "none"
