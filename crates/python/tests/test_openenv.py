"""OpenEnv: `spade.openenv.create_app` (OpenEnv's own server code over `SpadeEnvironment`),
served by uvicorn and driven by the stock `GenericEnvClient`, plays as `spade run`; an
environment that fails ends its episode with the error, and the server passes
`openenv validate`. `create_mcp_app` (`SpadeMCPEnvironment`) serves a tool-use environment's
tools over MCP: the stock `MCPToolClient` lists and calls them, with `spade run`'s
observations, and every failure comes back as a tool error with its reason."""

import json
import socket
import subprocess
import sys
import threading
import time

import pytest
import uvicorn
from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient

from conftest import ENVS, fixture_actions, fixture_source, run_spade
import spade
from spade.openenv import (SpadeAction, SpadeEnvironment, SpadeMCPEnvironment, create_app,
                           create_mcp_app)


def _serve(app):
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


@pytest.fixture(scope="module")
def url():
    yield from _serve(create_app({
        "grid_walk": fixture_source("grid_walk"),
        "fault_step_four_tuple": fixture_source("fault_step_four_tuple")}))


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


@pytest.mark.parametrize("server", ["url", "mcp_url"])
def test_openenv_validate_passes(server, request):
    openenv = str(__import__("pathlib").Path(sys.executable).parent / "openenv")
    url = request.getfixturevalue(server)
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


# A tool-use environment: the tools of `spade.Env.tools` served as MCP tools by OpenEnv's own
# server code (`create_mcp_app`, `SpadeMCPEnvironment`), called by the stock `MCPToolClient`.

FAULTY_TOOLS = '''
class FaultyToolsEnv(ToolUseBaseEnv):
    def __init__(self, max_turns=8):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        super().reset(seed)
        empty = {"type": "object", "properties": {}}
        self._tools = {
            "spin": {"description": "Never returns.", "parameters": empty},
            "explode": {"description": "Breaks the environment.", "parameters": empty},
        }
        return "Call a tool.", {}

    def tool_spin(self):
        while True:
            pass

    def step(self, action):
        if '"explode"' in action:
            raise RuntimeError("the environment broke")
        return super().step(action)
'''


def _tool_call(name, arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@pytest.fixture(scope="module")
def mcp_url():
    runtime = spade.Runtime(limits={"fuel_per_call": 100_000_000})
    app = create_mcp_app({"tool_inventory": fixture_source("tool_inventory"),
                          "faulty_tools": FAULTY_TOOLS}, runtime=runtime)
    yield from _serve(app)


def test_the_stock_mcp_client_calls_the_tools_as_spade_run(mcp_url, tmp_path):
    with MCPToolClient(base_url=mcp_url).sync() as env:
        reset = env.reset(env_id="tool_inventory", seed=3)
        tools = {tool.name: tool for tool in env.list_tools()}
        assert sorted(tools) == ["answer", "get_price", "get_stock"]
        assert tools["get_price"].description == "Price of one unit of an item, in dollars."
        assert tools["get_price"].input_schema == {
            "type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}
        assert tools["answer"].input_schema["required"] == ["answer"]
        target = reset.observation.info["target"]
        calls = [("get_price", {"item": target}), ("get_stock", {"item": target}),
                 ("get_price", {"item": "durian"})]          # the tool raises
        results = [env.call_tool(name, **arguments) for name, arguments in calls]
        with pytest.raises(RuntimeError, match=r"^Tool 'get_weather' failed: "
                                               r"Unknown tool: 'get_weather'$"):
            env.call_tool("get_weather")
        with pytest.raises(RuntimeError, match=r"^Tool 'answer' failed: the answer tool needs "
                                               r"the argument 'answer' \(the final answer\)$"):
            env.call_tool("answer")
        price, stock = (float(r["observation"].split("\n")[1]) for r in results[:2])
        answer = str(round(price * stock, 2))
        results.append(env.call_tool("answer", answer=answer))
        assert env.state().step_count == 4   # refused calls played no turn
        with pytest.raises(RuntimeError, match=r"^Tool 'get_stock' failed: The episode is over\.$"):
            env.call_tool("get_stock", item=target)
        after = env.step(SpadeAction(message="<answer>0</answer>"))
        assert (after.observation.text, after.done) == ("The episode is over.", True)

    actions = tmp_path / "actions.txt"
    actions.write_text("\n".join([_tool_call(n, a) for n, a in calls]
                                 + [f"<answer>{answer}</answer>"]) + "\n")
    expected = [json.loads(line) for line in run_spade(
        "run", ENVS / "tool_inventory" / "env.py", "--seed", "3", "--json", "--actions",
        actions).stdout.splitlines()]
    assert reset.observation.text == expected[1]["observation"]
    steps = [r for r in expected if r["call"] == "step"]
    assert [{key: want[key] for key in ("observation", "reward", "terminated", "truncated",
                                        "info")} for want in steps] == results
    assert steps[2]["observation"].startswith("Error calling get_price: ")
    assert steps[3]["reward"] == 1.0 and steps[3]["terminated"]


def test_tool_errors_come_back_with_their_reason_and_the_server_lives(mcp_url):
    with MCPToolClient(base_url=mcp_url).sync() as env:
        env.reset(env_id="faulty_tools")
        with pytest.raises(RuntimeError, match=r"^Tool 'spin' failed: The episode ended with "
                                               r"an error \(out_of_fuel\): "):
            env.call_tool("spin")
        with pytest.raises(RuntimeError, match=r"^Tool 'spin' failed: The episode is over\.$"):
            env.call_tool("spin")
        env.reset(env_id="faulty_tools")
        with pytest.raises(RuntimeError, match=r"(?s)^Tool 'explode' failed: The episode ended "
                                               r"with an error \(exception\): .*"
                                               r"RuntimeError: the environment broke"):
            env.call_tool("explode")
        env.reset(env_id="faulty_tools")
        for arguments, message in [
                ({"answer": True}, "the answer tool's argument 'answer' must be a string or a "
                                   "number, not a boolean"),
                ({"answer": "4", "why": "x"}, "the answer tool takes only 'answer', not 'why'")]:
            with pytest.raises(RuntimeError) as refused:
                env.call_tool("answer", **arguments)
            assert str(refused.value) == f"Tool 'answer' failed: {message}"
        assert env.call_tool("answer", answer=4)["observation"] == "Incorrect answer."
        assert sorted(t.name for t in env.list_tools(use_cache=False)) == \
            ["answer", "explode", "spin"]
        env.reset(env_id="tool_inventory")
        assert sorted(t.name for t in env.list_tools(use_cache=False)) == \
            ["answer", "get_price", "get_stock"]
        assert env.call_tool("get_stock", item="fig")["observation"].startswith("Tool result:\n")


def test_the_mcp_environment_class_directly():
    env = SpadeMCPEnvironment({"tool_inventory": fixture_source("tool_inventory")})
    assert env.SUPPORTS_CONCURRENT_SESSIONS
    assert env.step(ListToolsAction()).tools == []
    env.reset(seed=3)
    assert [t.name for t in env.step(ListToolsAction()).tools] == \
        ["get_price", "get_stock", "answer"]
    obs = env.step(CallToolAction(tool_name="get_stock", arguments={"item": "fig"}))
    assert obs.error is None
    assert obs.result.structured_content["observation"].startswith("Tool result:\n")
    assert env.state.step_count == 1
    assert env.step(SpadeAction(message="<answer>0</answer>")).text == "Incorrect answer."
    env.close()
    bad = SpadeMCPEnvironment({"bad": FAULTY_TOOLS.replace('"spin":', '"step":')})
    with pytest.raises(ValueError, match="the environment's tool 'step' has a name OpenEnv "
                                         "reserves \\(close, reset, state, step\\)"):
        bad.reset()
    bad.close()
