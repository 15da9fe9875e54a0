"""A recording made from Python replays with `spade replay`, and `spade.check` gives the
verdict of `spade check`."""

import json

import pytest

import spade
from conftest import ENVS, fixture_actions, fixture_source, run_spade


def test_recording_replays_with_spade_replay(runtime, tmp_path):
    path = tmp_path / "echo.jsonl"
    env = runtime.load(fixture_source("echo_word"), seed=7, record=path, hint="say karma")
    env.reset(seed=7)
    for action in fixture_actions("echo_word"):
        *_, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    env.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["hint"] == "say karma"
    assert [l.get("call") for l in lines[1:-1]] == ["load", "reset", "step", "step", "step", "close"]
    done = run_spade("replay", path)
    assert done.stdout.startswith("identical: 6 calls (3 steps), outcome terminated"), done.stdout


def test_a_dropped_environment_still_finishes_its_recording(runtime, tmp_path):
    path = tmp_path / "dropped.jsonl"
    env = runtime.load(fixture_source("echo_word"), seed=7, record=path)
    env.reset(seed=7)
    env.step("\\boxed{word}")
    del env
    done = run_spade("replay", path)
    assert done.stdout.startswith("identical: 3 calls (1 steps)"), done.stdout


def test_a_failed_load_is_recorded_and_raised(runtime, tmp_path):
    path = tmp_path / "syntax.jsonl"
    with pytest.raises(spade.LoadError, match="syntax error"):
        runtime.load(fixture_source("fault_syntax_error"), record=path)
    done = run_spade("replay", path)
    assert done.stdout.startswith("identical: 1 calls (0 steps), outcome error:load"), done.stdout


def test_an_unwritable_recording_is_an_os_error(runtime, tmp_path):
    with pytest.raises(OSError, match="creating the recording"):
        runtime.load(fixture_source("echo_word"), record=tmp_path / "missing" / "x.jsonl")


def test_check_accepts_a_good_env_and_explains_a_bad_one(runtime):
    good = runtime.check(fixture_source("arithmetic_puzzle"), seeds=2)
    assert good.accepted and good.class_name == "ArithmeticPuzzleEnv"
    assert good.errors == []
    # nondeterminism: its reset is not reproducible, so check rejects it.
    bad = runtime.check((ENVS / "nondeterminism" / "env.py").read_text(), seeds=2)
    cli = json.loads(run_spade("check", ENVS / "nondeterminism" / "env.py", "--seeds", "2",
                               "--json", check=False).stdout)
    assert bad.accepted == cli["accepted"]
    assert [f.code for f in bad.findings] == [f["code"] for f in cli["findings"]]
    assert not bad.accepted and bad.errors
    assert all(isinstance(f, spade.Finding) for f in bad.findings)
    with_trajectory = [f for f in bad.findings if f.trajectory]
    assert with_trajectory and with_trajectory[0].trajectory.startswith("{")
