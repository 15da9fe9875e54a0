import os
import time

CALLS = 0


class NoiseEnv:
    """Reads every source of nondeterminism an environment can reach and shows it.

    In the sandbox all of them are functions of the seed and the call sequence, so two runs
    print the same observation. `CALLS` is a module global: a new sandbox starts it at 0.
    """

    def __init__(self, max_turns=5):
        self.max_turns = max_turns
        self.turn_count = 0

    def _noise(self):
        global CALLS
        CALLS += 1
        started = time.perf_counter()
        values = {
            "calls": CALLS,
            "random": random.random(),
            "system_random": random.SystemRandom().random(),
            "urandom": os.urandom(8).hex(),
            "time": time.time(),
            "monotonic": time.monotonic(),
            "hash_str": hash("x"),
            "hash_bytes": hash(b"x"),
            "id": id(object()) % 100000,
            "set_order": "".join(set("abcdefghij")),
            "elapsed": time.perf_counter() - started,
        }
        return json.dumps(values, sort_keys=True)

    def reset(self, seed=None):
        self.turn_count = 0
        return self._noise(), {}

    def step(self, action):
        self.turn_count += 1
        return self._noise(), 0.0, False, self.turn_count >= self.max_turns, {}

    def solution(self):
        return "none"
