"""The GIL is released while a guest runs: two threads stepping two long environments finish
in about the time of one (on two or more cores), and asyncio loops can await steps."""

import asyncio
import os
import threading
import time

import pytest

import spade

BUSY = """
class BusyEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns
    def reset(self, seed=None):
        return "ready", {}
    def step(self, action):
        total = 0
        for i in range(int(action)):
            total += i % 7
        return str(total), 0.0, False, False, {}
"""

# Enough work for a few hundred milliseconds per step.
ITERATIONS = "1500000"


def timed_steps(runtime, threads):
    envs = [runtime.load(BUSY) for _ in range(threads)]
    for env in envs:
        env.reset(seed=1)
    results = [None] * threads

    def work(i):
        results[i] = envs[i].step(ITERATIONS)[0]

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    assert len(set(results)) == 1 and results[0] is not None
    return elapsed


def test_a_short_guest_call_finishes_inside_a_long_one(runtime):
    """While one thread's guest runs a long step, another thread's guest runs a short one to
    its end: with the GIL held, the second call could not even start before the first returned.
    (On one core the OS shares it; the short step still ends first.)"""
    long_env, short_env = runtime.load(BUSY), runtime.load(BUSY)
    long_env.reset(seed=1)
    short_env.reset(seed=1)
    ended = {}
    started = threading.Event()

    def long_call():
        started.set()
        long_env.step(str(int(ITERATIONS) * 2))
        ended["long"] = time.perf_counter()

    def short_call():
        started.wait()
        time.sleep(0.02)  # the long call is inside the guest by now
        short_env.step(str(int(ITERATIONS) // 10))
        ended["short"] = time.perf_counter()

    threads = [threading.Thread(target=long_call), threading.Thread(target=short_call)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ended["short"] < ended["long"], ended


@pytest.mark.skipif(
    not os.environ.get("SPADE_TIMING_TESTS"),
    reason="a timing test: needs two idle cores (SPADE_TIMING_TESTS=1 pytest crates/python/tests)",
)
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores to run in parallel")
def test_two_threads_step_in_parallel(runtime):
    timed_steps(runtime, 1)  # warm the source cache
    one = min(timed_steps(runtime, 1) for _ in range(2))
    two = min(timed_steps(runtime, 2) for _ in range(2))
    print(f"one step {one:.3f} s, two steps on two threads {two:.3f} s")
    # Serialised by the GIL, two steps would take 2x one.
    assert two < 1.5 * one, (one, two)


def test_other_python_threads_run_while_a_guest_runs(runtime):
    env = runtime.load(BUSY)
    env.reset(seed=1)
    ticks = 0
    done = threading.Event()

    def count():
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            time.sleep(0.001)

    counter = threading.Thread(target=count)
    counter.start()
    env.step(ITERATIONS)
    done.set()
    counter.join()
    assert ticks > 20, ticks


def test_asyncio_steps_are_awaited_concurrently(runtime):
    async def episode(seed):
        async with runtime.load(BUSY) as env:
            obs, info = await env.areset(seed=seed)
            assert obs == "ready"
            return (await env.astep("1000"))[0]

    async def main():
        return await asyncio.gather(episode(1), episode(2), episode(3))

    assert asyncio.run(main()) == [str(sum(i % 7 for i in range(1000)))] * 3
