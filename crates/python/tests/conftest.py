"""Shared fixtures of the wheel's tests: the repository's fixture environments, the `spade`
binary they are compared with, and runtimes with the limits the Rust tests use."""

import json
import os
import pathlib
import subprocess

import pytest

import spade

REPO = pathlib.Path(__file__).resolve().parents[3]
ENVS = REPO / "tests" / "envs"
ESCAPE = REPO / "tests" / "escape"

# The Rust tests' `test_limits()` (tests/support/fixtures.rs): small enough that faults end fast.
TEST_LIMITS = spade.Limits(
    fuel_per_call=1_000_000_000,
    load_fuel=4_000_000_000,
    memory_limit=128 << 20,
    call_deadline=60.0,
    output_limit=64 << 10,
)


def spade_bin():
    """The `spade` binary of this checkout (`$SPADE_BIN`, else target/debug/spade)."""
    path = pathlib.Path(os.environ.get("SPADE_BIN", REPO / "target" / "debug" / "spade"))
    if not path.exists():
        pytest.fail(f"no spade binary at {path}: run `cargo build` first, or set SPADE_BIN")
    return path


def run_spade(*args, check=True):
    """Runs the `spade` binary; returns the completed process."""
    done = subprocess.run(
        [str(spade_bin()), *map(str, args)], capture_output=True, text=True, timeout=600
    )
    if check and done.returncode != 0:
        raise AssertionError(f"spade {args} failed ({done.returncode}):\n{done.stderr}")
    return done


def fixture_names(faults):
    return sorted(p.name for p in ENVS.iterdir() if p.name.startswith("fault_") == faults)


def fixture_source(name):
    return (ENVS / name / "env.py").read_text()


def fixture_actions(name):
    path = ENVS / name / "actions.txt"
    return path.read_text().splitlines() if path.exists() else []


def fixture_expected_fault(name):
    return json.loads((ENVS / name / "expected.json").read_text())


@pytest.fixture(scope="session")
def runtime():
    """A runtime with the default limits."""
    return spade.Runtime()


@pytest.fixture(scope="session")
def test_runtime():
    """A runtime with `TEST_LIMITS`."""
    return spade.Runtime(limits=TEST_LIMITS)
