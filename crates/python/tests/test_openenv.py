"""OpenEnv: `spade.openenv.create_app` (OpenEnv's own server code over `SpadeEnvironment`),
served by uvicorn and driven by the stock `GenericEnvClient`, plays as `spade run`; an
environment that fails ends its episode with the error, and the server passes
`openenv validate`."""

import json
import socket
import subprocess
import sys
import threading
import time

import pytest
import uvicorn
from openenv.core.generic_client import GenericEnvClient

from conftest import ENVS, fixture_actions, fixture_source, run_spade
from spade.openenv import SpadeAction, SpadeEnvironment, create_app


@pytest.fixture(scope="module")
def url():
    app = create_app({"grid_walk": fixture_source("grid_walk"),
                      "fault_step_four_tuple": fixture_source("fault_step_four_tuple")})
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def test_the_stock_client_plays_as_spade_run(url):
    done = run_spade("run", ENVS / "grid_walk" / "env.py", "--seed", "7", "--json",
                     "--actions", ENVS / "grid_walk" / "actions.txt")
    expected = [json.loads(line) for line in done.stdout.splitlines()]
    with GenericEnvClient(base_url=url).sync() as env:
        result = env.reset(env_id="grid_walk", seed=7)
        assert result.observation["text"] == expected[1]["observation"]
        assert result.observation["info"] == expected[1]["info"]
        for action, want in zip(fixture_actions("grid_walk"),
                                [r for r in expected if r["call"] == "step"]):
            result = env.step({"message": action})
            obs = result.observation
            assert (obs["text"], result.reward, obs["terminated"], obs["truncated"], obs["info"]) \
                == (want["observation"], want["reward"], want["terminated"], want["truncated"],
                    want["info"])
            assert result.done == (want["terminated"] or want["truncated"])
    assert expected[-1]["call"] == "end"


def test_an_environment_error_ends_the_episode_with_its_reason(url):
    with GenericEnvClient(base_url=url).sync() as env:
        env.reset(env_id="fault_step_four_tuple", seed=7)
        result = env.step({"message": "anything"})
        assert result.done and result.reward == 0.0
        error = result.observation["error"]
        assert error["kind"] == "contract"
        assert "step() must return a tuple" in error["message"]
        assert result.observation["text"].startswith("The episode ended with an error (contract): ")


def test_openenv_validate_passes(url):
    openenv = str(__import__("pathlib").Path(sys.executable).parent / "openenv")
    done = subprocess.run([openenv, "validate", url, "--json"], capture_output=True, text=True)
    report = json.loads(done.stdout)
    failed = [c for c in report["criteria"] if not c["passed"]]
    assert done.returncode == 0 and report["passed"], failed


def test_the_environment_class_directly():
    env = SpadeEnvironment({"grid_walk": fixture_source("grid_walk")})
    assert env.SUPPORTS_CONCURRENT_SESSIONS
    with pytest.raises(RuntimeError, match=r"call reset\(\) before step\(\)"):
        env.step(SpadeAction(message="x"))
    with pytest.raises(ValueError, match="unknown env_id 'nope': known are grid_walk"):
        env.reset(env_id="nope")
    obs = env.reset(seed=7)
    assert obs.text.startswith("Reach G from P.") and env.state.env_id == "grid_walk"
    env.step(SpadeAction(message="\\boxed{right}"))
    assert env.state.step_count == 1
    env.close()
    with pytest.raises(ValueError, match="SpadeEnvironment needs at least one environment"):
        SpadeEnvironment({})
