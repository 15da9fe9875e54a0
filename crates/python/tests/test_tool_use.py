"""`spade.compat.Game.execute_tool`: the SPADE reference's tool-use player calls
`env.execute_tool(name, arguments)` and reads `{"output", "returncode"}`. Played on the fixture
`tool_inventory`, each call answers what `spade run` shows for the same `<tool_call>` step."""

import json

from conftest import ENVS, fixture_source, run_spade
from spade import compat

CALLS = [
    ("get_price", {"item": "apple"}),
    ("get_weather", {}),
    ("get_price", {"item": "durian"}),
    ("get_stock", {"item": "apple"}),
]
ANSWER = "<answer>$47.04</answer>"


def spade_run(tmp_path, actions):
    path = tmp_path / "actions.txt"
    path.write_text("\n".join(actions) + "\n")
    done = run_spade("run", ENVS / "tool_inventory" / "env.py", "--seed", "7", "--json",
                     "--actions", path)
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_execute_tool_answers_as_spade_run_steps(tmp_path):
    actions = [
        "<tool_call>" + json.dumps({"name": n, "arguments": a}) + "</tool_call>" for n, a in CALLS
    ]
    transcript = spade_run(tmp_path, actions + [ANSWER])
    steps = [r for r in transcript if r["call"] == "step"]
    assert len(steps) == len(CALLS) + 1, transcript

    game = compat.load_game_from_code(fixture_source("tool_inventory"), max_steps=8, seed=7)
    obs, _info = game.reset(seed=7)
    assert obs == transcript[1]["observation"]
    assert [t["function"]["name"] for t in game.get_tools()] == ["get_price", "get_stock"]
    results = [game.execute_tool(name, args) for name, args in CALLS]
    # A call that ran: returncode 0 and the tool's str(result), which the step shows after
    # "Tool result:\n". An unknown tool or a tool that raised: returncode 1 and the step's text.
    assert results[0] == {"output": steps[0]["observation"].removeprefix("Tool result:\n"),
                          "returncode": 0}
    assert steps[0]["observation"].startswith("Tool result:\n")
    assert results[1] == {"output": steps[1]["observation"], "returncode": 1}
    assert results[1]["output"].startswith("Unknown tool 'get_weather'")
    assert results[2] == {"output": steps[2]["observation"], "returncode": 1}
    assert results[2]["output"].startswith("Error calling get_price: ")
    assert results[3]["returncode"] == 0
    assert "Tool result:\n" + results[3]["output"] == steps[3]["observation"]
    # The final answer goes through step, as the reference's player sends it.
    obs, reward, terminated, truncated, _ = game.step(ANSWER)
    assert (obs, reward, terminated, truncated) == (
        steps[4]["observation"], steps[4]["reward"], steps[4]["terminated"], steps[4]["truncated"]
    )
    assert (reward, terminated) == (1.0, True)
    game.close()


def test_execute_tool_errors_are_return_codes_not_exceptions():
    game = compat.load_game_from_code(fixture_source("tool_inventory"), max_steps=20, seed=7)
    game.reset(seed=7)
    assert game.execute_tool("get_price", ["apple"]) == {
        "output": "Error calling get_price: arguments must be a JSON object, not list",
        "returncode": 1,
    }
    assert game.execute_tool(3, {}) == {
        "output": "Error calling 3: the tool name must be a string", "returncode": 1,
    }
    assert game.execute_tool("get_price", {"item": object()})["output"].startswith(
        "Error calling get_price: Object of type object is not JSON serializable"
    )
    # An argument holding the protocol's tags reaches the tool as a string: it neither closes
    # the call nor is read as an answer.
    result = game.execute_tool("get_price", {"item": "</tool_call><answer>1</answer>"})
    assert result == {
        "output": "Error calling get_price: \"unknown item '</tool_call><answer>1</answer>'\"",
        "returncode": 1,
    }
    game.close()


def test_a_sandbox_limit_in_a_tool_ends_the_game_with_a_visible_reason():
    source = fixture_source("tool_inventory").replace(
        "    def tool_get_stock(self, item):\n",
        "    def tool_get_stock(self, item):\n        while True:\n            pass\n",
    )
    import spade
    from conftest import TEST_LIMITS

    game = compat.load_game_from_code(source, max_steps=20, seed=7,
                                      runtime=spade.Runtime(limits=TEST_LIMITS))
    game.reset(seed=7)
    result = game.execute_tool("get_stock", {"item": "apple"})
    assert result["returncode"] == 1
    assert result["output"].startswith("Error calling get_stock: the game ended with an error: "), result
    assert "fuel" in result["output"], result
    again = game.execute_tool("get_price", {"item": "apple"})
    assert again["returncode"] == 1 and "the game ended with an error" in again["output"], again
    try:
        game.step("<answer>1</answer>")
    except spade.SandboxDead:
        pass
    else:
        raise AssertionError("a dead game's step must raise SandboxDead")


# A stand-in for the reference's module, with the call shape of its trainer: the environment's
# constructor loads the game with `self._load_game_from_code(code, max_steps=...,
# respect_game_max_turns=...)` (an `exec` loader, here one that must not be reached).
REFERENCE_STANDIN = '''
class SyntheticGameEnv:
    def __init__(self, game_code, max_steps=1000, respect_game_max_turns=False):
        self.game = self._load_game_from_code(game_code, max_steps=max_steps,
                                              respect_game_max_turns=respect_game_max_turns)

    def _load_game_from_code(self, code, max_steps=1000, respect_game_max_turns=False):
        raise AssertionError("the exec loader ran")
'''


def test_patch_reference_swaps_the_trainers_loader(tmp_path, monkeypatch):
    package = tmp_path / "spare" / "core" / "envs"
    package.mkdir(parents=True)
    for folder in (tmp_path / "spare", tmp_path / "spare" / "core", package):
        (folder / "__init__.py").write_text("")
    (package / "synthetic_game_env.py").write_text(REFERENCE_STANDIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    cls = compat.patch_reference()
    env = cls(fixture_source("tool_inventory"), max_steps=8)
    assert isinstance(env.game, compat.Game) and env.game.max_turns == 8
    env.game.reset(seed=7)
    assert env.game.execute_tool("get_stock", {"item": "apple"})["returncode"] == 0
    env.game.close()
    import pytest

    with pytest.raises(AttributeError, match="module 'json' has no SyntheticGameEnv to patch"):
        compat.patch_reference("json")
