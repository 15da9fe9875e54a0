"""Each sandbox outcome raises its exception type, with its `kind`; bad arguments raise with
messages that say what is wrong."""

import pytest

import spade
from conftest import TEST_LIMITS, fixture_expected_fault, fixture_names, fixture_source

CLASS_OF_KIND = {
    "load": spade.LoadError,
    "contract": spade.ContractError,
    "exception": spade.EnvException,
    "out_of_fuel": spade.OutOfFuel,
    "deadline": spade.Deadline,
    "memory_limit": spade.MemoryLimit,
    "stack_overflow": spade.StackOverflow,
    "guest_trap": spade.GuestTrap,
}

LOOP = """
class LoopEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns
    def reset(self, seed=None):
        return "go", {}
    def step(self, action):
        while True:
            pass
"""

GOOD = """
class CountEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns
    def reset(self, seed=None, difficulty=0):
        self.n = difficulty
        return f"at {self.n}", {"n": self.n}
    def step(self, action):
        self.n += 1
        return f"at {self.n}", 0.5, self.n >= 3, False, {"n": self.n, "pair": (1, 2)}
    def solution(self):
        return "\\\\boxed{3}"
"""


@pytest.mark.parametrize("name", fixture_names(faults=True))
def test_fault_fixture_raises_its_type(test_runtime, name):
    expected = fixture_expected_fault(name)
    cls = CLASS_OF_KIND[expected["kind"]]
    with pytest.raises(cls) as caught:
        env = test_runtime.load(fixture_source(name), seed=7)
        assert expected["call"] != "load", f"{name}: load succeeded"
        env.reset(seed=7)
        assert expected["call"] != "reset", f"{name}: reset succeeded"
        if expected["call"] == "solution":
            env.solution()
        else:
            env.step("\\boxed{1}")
    err = caught.value
    assert err.kind == expected["kind"]
    for needle in expected["contains"]:
        assert needle in str(err), (needle, str(err))
    if isinstance(err, spade.SandboxLimit):
        with pytest.raises(spade.SandboxDead) as again:
            env.step("\\boxed{1}")
        assert again.value.reason == expected["kind"]
        assert "this sandbox is dead after an earlier" in str(again.value)
        assert env.dead == expected["kind"]


def test_every_outcome_has_a_fixture():
    kinds = {fixture_expected_fault(n)["kind"] for n in fixture_names(faults=True)}
    assert {"load", "contract", "exception", "out_of_fuel", "memory_limit",
            "stack_overflow"} <= kinds, kinds


def test_exception_carries_the_guest_traceback(test_runtime):
    env = test_runtime.load(fixture_source("fault_reset_raises"), seed=7)
    with pytest.raises(spade.EnvException) as caught:
        env.reset(seed=7)
    assert "Traceback" in caught.value.traceback
    assert "ValueError: board too small" in caught.value.traceback
    assert isinstance(caught.value, spade.EnvError)
    # An exception leaves the sandbox usable.
    assert env.dead is None


def test_out_of_fuel_is_deterministic_and_kills_the_sandbox():
    runtime = spade.Runtime(limits={"fuel_per_call": 50_000_000})
    env = runtime.load(LOOP)
    env.reset(seed=1)
    with pytest.raises(spade.OutOfFuel) as caught:
        env.step("x")
    assert caught.value.kind == "out_of_fuel"
    assert "50000000" in str(caught.value)
    assert env.last_fuel == 50_000_000
    assert isinstance(caught.value, spade.SandboxLimit)


def test_deadline_stops_a_call_that_fuel_would_not():
    runtime = spade.Runtime(limits={"fuel_per_call": 10**15, "call_deadline": 0.2})
    env = runtime.load(LOOP)
    env.reset(seed=1)
    with pytest.raises(spade.Deadline) as caught:
        env.step("x")
    assert caught.value.kind == "deadline"
    assert "deadline exceeded" in str(caught.value)


def test_values_have_the_reference_types(runtime):
    env = runtime.load(GOOD, seed=3)
    obs, info = env.reset(seed=5)
    assert (obs, info) == ("at 0", {"n": 0})
    obs, reward, terminated, truncated, info = env.step("a")
    assert (type(obs), type(reward), type(terminated), type(truncated), type(info)) == (
        str, float, bool, bool, dict)
    # info travels as JSON: a tuple comes back as a list.
    assert info == {"n": 1, "pair": [1, 2]}
    assert env.solution() == "\\boxed{3}"
    assert env.class_name == "CountEnv" and env.max_turns == 3


def test_reset_fields_are_passed_and_unknown_ones_refused(runtime):
    env = runtime.load(GOOD)
    assert env.reset(seed=1, difficulty=2) == ("at 2", {"n": 2})
    with pytest.raises(spade.UsageError, match="does not take level"):
        env.reset(seed=1, level=2)


def test_integer_reset_fields_of_any_size_arrive_exactly(runtime):
    # Issue 53 (Low): fields reach reset as json.loads gives them; 2**64 + 1 was a float once.
    env = runtime.load(GOOD)
    assert env.reset(seed=1, difficulty=2**64 + 1) == (
        "at 18446744073709551617", {"n": 2**64 + 1})
    obs, _ = env.reset(seed=1, difficulty=10**400)
    assert obs == "at 1" + "0" * 400


def test_calls_after_close_are_usage_errors(runtime):
    with runtime.load(GOOD) as env:
        env.reset(seed=1)
    assert env.dead == "closed"
    with pytest.raises(spade.UsageError, match=r"step\(\) on a closed environment"):
        env.step("a")
    env.close()  # closing twice does nothing


def test_a_full_pool_raises_capacity_error():
    runtime = spade.Runtime(pool_slots=1, snapshots=False)
    first = runtime.load(GOOD)
    with pytest.raises(spade.CapacityError) as caught:
        runtime.load(GOOD)
    first.close()
    # The slot is free again.
    runtime.load(GOOD).close()
    assert caught.value.kind == "capacity"
    assert "no free sandbox slot" in str(caught.value)


@pytest.mark.parametrize(
    "limits, message",
    [
        ({"fuel": 1}, "unknown limit 'fuel'"),
        ({"fuel_per_call": -1}, "fuel_per_call must be a non-negative integer"),
        ({"memory_limit": True}, "memory_limit must be an integer, not a bool"),
        ({"call_deadline": 0}, "call_deadline must be a positive number of seconds"),
        ({"call_deadline": "soon"}, "call_deadline must be a number of seconds"),
    ],
)
def test_bad_limits_are_refused(limits, message):
    with pytest.raises(ValueError, match=message):
        spade.Runtime(limits=limits)


def test_bad_arguments_are_refused(runtime):
    with pytest.raises(TypeError, match="source must be str"):
        runtime.load(b"class A: pass")
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*64\)"):
        runtime.load(GOOD, seed=-1)
    with pytest.raises(ValueError, match="max_turns must be a non-negative integer"):
        runtime.load(GOOD, max_turns=1.5)
    env = runtime.load(GOOD)
    with pytest.raises(TypeError, match="action must be str"):
        env.step(3)
    with pytest.raises(TypeError, match="limits must be a spade.Limits or a dict"):
        spade.Runtime(limits=[1])


def test_limits_round_trip():
    runtime = spade.Runtime(limits=TEST_LIMITS)
    assert runtime.limits == TEST_LIMITS
    assert spade.Runtime().limits == spade.Limits()
