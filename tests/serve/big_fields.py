"""An environment whose `reset` takes two integer fields and reports what arrived, for the serve
test of integer reset fields of any size: OpenEnv's server passes what Python's `json.loads`
gives, so `2**64 + 1` must arrive as that exact int (not a float) and `10**400` as an int of 401
digits (not an error). A step wins when it answers `n` exactly, as `\\boxed{n}`."""


class BigFieldsEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns
        self.n = 0

    def reset(self, seed=None, n=0, m=0):
        self.n = n
        return "Echo n.", {
            "n": str(n),
            "n_type": type(n).__name__,
            "m_digits": len(str(m)),
            "m_type": type(m).__name__,
        }

    def step(self, action):
        won = action.strip() == self.solution()
        return ("Right." if won else "Wrong."), (1.0 if won else 0.0), True, False, {}

    def solution(self):
        return f"\\boxed{{{self.n}}}"

    def close(self):
        pass
