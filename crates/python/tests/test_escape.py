"""The escape and abuse corpus (tests/escape), from Python: every hostile program ends in the
outcome written by hand beside it, and a fresh sandbox afterwards behaves as before."""

import pathlib

import pytest

import spade
from conftest import ESCAPE, fixture_source

# The sandbox's escape test's limits (crates/sandbox/tests/all/escape.rs).
ESCAPE_LIMITS = spade.Limits(
    fuel_per_call=300_000_000,
    load_fuel=4_000_000_000,
    memory_limit=128 << 20,
    call_deadline=30.0,
    output_limit=64 << 10,
)

PROGRAMS = sorted(p.stem for p in ESCAPE.glob("*.py"))


def expected_outcome(name):
    fields = {}
    for line in (ESCAPE / f"{name}.expected").read_text().splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            fields[key] = value
    return fields["call"], fields["kind"], fields["contains"]


def run_program(runtime, source, with_solution):
    """load, reset(seed=1), step("\\boxed{1}"), and solution() when that is the expected call:
    `(call, kind, text)` of how it ended."""
    try:
        env = runtime.load(source, seed=1)
    except spade.SpadeError as err:
        return "load", err.kind, str(err)
    try:
        env.reset(seed=1)
    except spade.SpadeError as err:
        return "reset", err.kind, str(err)
    try:
        obs, *_ = env.step("\\boxed{1}")
    except spade.SpadeError as err:
        return "step", err.kind, str(err)
    if with_solution:
        try:
            env.solution()
        except spade.SpadeError as err:
            return "solution", err.kind, str(err)
    env.close()
    return "step", "ok", obs


@pytest.fixture(scope="module")
def escape_runtime():
    return spade.Runtime(limits=ESCAPE_LIMITS)


def baseline(runtime):
    env = runtime.load(fixture_source("arithmetic_puzzle"), seed=3)
    reset = env.reset(seed=3)
    step = env.step("\\boxed{100}")
    fuel = env.last_fuel
    env.close()
    return reset, step, fuel


@pytest.mark.parametrize("name", PROGRAMS)
def test_hostile_program_ends_in_its_expected_outcome(escape_runtime, name):
    call, kind, contains = expected_outcome(name)
    before = baseline(escape_runtime)
    got = run_program(escape_runtime, (ESCAPE / f"{name}.py").read_text(), call == "solution")
    assert got[:2] == (call, kind), got
    assert contains in got[2], (contains, got[2][:500])
    assert baseline(escape_runtime) == before


def test_the_corpus_is_all_there():
    assert len(PROGRAMS) >= 70, len(PROGRAMS)
    assert all((ESCAPE / f"{n}.expected").exists() for n in PROGRAMS)
