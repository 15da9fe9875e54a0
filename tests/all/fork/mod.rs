//! Forking a live episode: the sandbox core (`Runtime::fork`), `Episode::fork` with its
//! recording and replay, and the hand-written environment whose state every test inspects.

mod cli;
mod episode;
mod sandbox;

/// An environment whose every kind of state shows in its observation: an attribute counter,
/// a list, a module-level dict, a seeded `random.Random`, the module-global `random`, WASI
/// entropy (`os.urandom`) and the virtual clock. `add:X` appends X; `burn` loops forever (out
/// of fuel); `print` prints.
pub const STATEFUL: &str = r#"
import os
import random
import time

SEEN = {}

class StatefulEnv:
    def __init__(self, max_turns=1000):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.count = 0
        self.items = []
        self.rng = random.Random(seed)
        return self.show(), {"seed": seed}

    def show(self):
        return (
            f"count={self.count} items={self.items} seen={sorted(SEEN.items())} "
            f"own={self.rng.random()!r} global={random.random()!r} "
            f"urandom={os.urandom(4).hex()} clock={time.time()!r}"
        )

    def step(self, action):
        if action == "burn":
            while True:
                pass
        if action == "print":
            print("printed")
        self.count += 1
        if action.startswith("add:"):
            self.items.append(action[4:])
            SEEN[action[4:]] = SEEN.get(action[4:], 0) + 1
        return self.show(), float(self.count), False, False, {"count": self.count}

    def solution(self):
        return str(self.count)
"#;
