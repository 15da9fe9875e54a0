"""`Env.fork`: copies of a live environment in exactly its state, recorded and replayable."""

import asyncio
import json
import threading
import time

import pytest

import spade
from conftest import run_spade

# Every kind of state in the observation: attributes, a module dict, a seeded generator, the
# module-global `random`, WASI entropy and the virtual clock.
STATEFUL = '''
import os
import random
import time

SEEN = {}

class StatefulEnv:
    def reset(self, seed=None):
        self.count = 0
        self.items = []
        self.rng = random.Random(seed)
        return self.show(), {}

    def show(self):
        return (f"count={self.count} items={self.items} seen={sorted(SEEN.items())} "
                f"own={self.rng.random()!r} global={random.random()!r} "
                f"urandom={os.urandom(4).hex()} clock={time.time()!r}")

    def step(self, action):
        if action == "print":
            print("printed")
        self.count += 1
        self.items.append(action)
        SEEN[action] = SEEN.get(action, 0) + 1
        return self.show(), float(self.count), False, False, {"count": self.count}
'''


def started(runtime, **options):
    env = runtime.load(STATEFUL, seed=4, **options)
    env.reset(seed=2)
    env.step("a")
    return env


def test_a_fork_agrees_with_its_parent_and_neither_sees_the_other(runtime):
    env = started(runtime)
    copy = env.fork()
    assert isinstance(copy, spade.Env)
    same = [env.step("b"), copy.step("b")]
    assert same[0] == same[1]
    assert env.last_fuel == copy.last_fuel > 0
    theirs, ours = env.step("p")[0], copy.step("c")[0]
    assert theirs.startswith("count=3 items=['a', 'b', 'p'] seen=[('a', 1), ('b', 1), ('p', 1)]"), theirs
    assert ours.startswith("count=3 items=['a', 'b', 'c'] seen=[('a', 1), ('b', 1), ('c', 1)]"), ours


def test_fork_n_reseeded_copies_draw_their_own_numbers(runtime):
    env = started(runtime)
    copies = env.fork(3, reseed=[None, 8, 8])
    assert len(copies) == 3
    observations = [c.step("x")[0] for c in copies]
    parent = env.step("x")[0]
    glob = lambda obs: obs.split(" global=")[1]
    assert observations[0] == parent
    assert glob(observations[1]) != glob(parent)
    assert observations[1] == observations[2]


def test_a_recorded_fork_replays_with_spade_replay(runtime, tmp_path):
    env = started(runtime, record=tmp_path / "parent.jsonl")
    copy = env.fork(record=tmp_path / "fork.jsonl", hint="branch")
    copy.step("f")
    copy.close()
    env.step("p")
    env.close()
    header = json.loads((tmp_path / "fork.jsonl").read_text().splitlines()[0])
    assert header["fork"]["parent"] == "parent.jsonl"
    assert header["fork"]["at"] == 3
    assert header["hint"] == "branch"
    done = run_spade("replay", tmp_path / "fork.jsonl")
    assert done.stdout.startswith("identical:"), done.stdout


def test_forks_that_cannot_be_made_raise_with_the_reason(runtime, tmp_path):
    env = started(runtime)
    with pytest.raises(spade.UsageError, match="cannot record a fork of an episode that is not recorded"):
        env.fork(record=tmp_path / "fork.jsonl")
    env.step("print")
    with pytest.raises(spade.UsageError, match="holds an open output stream"):
        env.fork()
    with pytest.raises(ValueError, match="one entry per copy"):
        env.fork(2, reseed=[1])
    with pytest.raises(ValueError, match="n must be a positive int"):
        env.fork(0)
    env.close()
    with pytest.raises(spade.UsageError, match="fork\\(\\) on a closed environment"):
        env.fork()


BIG = """
class BigEnv:
    def reset(self, seed=None):
        self.blob = b"x" * (64 << 20)
        return "big", {}

    def step(self, action):
        return str(len(self.blob)), 0.0, False, False, {}
"""


def test_afork_runs_in_a_worker_thread(runtime):
    env = started(runtime)

    async def main():
        copies = await env.afork(2)
        return [await c.astep("z") for c in copies]

    first, second = asyncio.run(main())
    assert first == second


def test_fork_releases_the_gil(runtime):
    """Another thread keeps running Python while copies of a 64 MiB state are made: with the
    GIL held for the call, its clock readings would leave a gap as long as the call."""
    env = runtime.load(BIG)
    env.reset()
    readings = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            readings.append(time.perf_counter())

    thread = threading.Thread(target=tick)
    thread.start()
    try:
        time.sleep(0.05)
        start = time.perf_counter()
        copies = env.fork(4)
        end = time.perf_counter()
    finally:
        stop.set()
        thread.join()
    assert [c.step("n")[0] for c in copies] == [str(64 << 20)] * 4
    inside = [start] + [t for t in readings if start < t < end] + [end]
    longest_gap = max(b - a for a, b in zip(inside, inside[1:]))
    assert end - start > 0.02, "the fork is long enough to see"
    assert longest_gap < (end - start) / 2, (longest_gap, end - start)
