"""OpenEnv (0.10): `SpadeEnvironment`, an `openenv` `Environment` over the in-process
runtime, and `create_app`, the FastAPI app OpenEnv's server code builds around it.

    from spade.openenv import create_app
    app = create_app({"grid_walk": source})          # uvicorn module:app, or uv run server

The wire format is `spade serve`'s: the action is `{"message": reply}`, the observation has
`text`, `info`, `terminated`, `truncated` (and `done`, `reward`), and `reset` takes `env_id`
(default: the only environment, or the one given here), `seed` and `max_turns`. Every session
(OpenEnv's `/ws`) gets its own `SpadeEnvironment`, and every `reset` a fresh sandbox, so
`SUPPORTS_CONCURRENT_SESSIONS` is true. An exception of the environment, a contract error or a
sandbox limit in `step` ends the episode: `done` with reward 0.0, the reason as `text` and in
`error` (`{"kind", "message"}`). An environment that fails to load or to reset raises, and
OpenEnv's server answers the error.

`SpadeMCPEnvironment` (`create_mcp_app`) is the `MCPEnvironment` for tool-use environments:
OpenEnv's `/mcp` (`tools/list`, `tools/call`, as the stock `MCPToolClient` calls them) lists
and calls the tools of the environment reset last (and `answer`), each call played as a step.

Install with `pip install spade-python[openenv]`.
"""

from __future__ import annotations

import functools
import json
import threading
import uuid
from typing import Any, Dict, Optional

import anyio
from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.tools.base import Tool, ToolResult
from mcp.types import TextContent
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import RESERVED_TOOL_NAMES
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field, PrivateAttr

from . import errors


class SpadeAction(Action):
    """One reply to the environment."""

    message: str = Field(description="The reply, passed to the environment's step()")


class SpadeObservation(Observation):
    """What the environment answered (`done` = terminated or truncated, or an error)."""

    text: str = Field(default="", description="The observation text")
    info: Dict[str, Any] = Field(default_factory=dict, description="The environment's info")
    terminated: bool = False
    truncated: bool = False
    error: Optional[Dict[str, str]] = Field(
        default=None, description="{kind, message} when an error ended the episode")


class SpadeState(State):
    env_id: Optional[str] = None
    seed: Optional[int] = None
    done: bool = False


class SpadeEnvironment(Environment[SpadeAction, SpadeObservation, SpadeState]):
    """One session: `envs` maps an `env_id` to its environment source."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, envs: Dict[str, str], runtime=None, env_id: Optional[str] = None):
        super().__init__()
        if not envs:
            raise ValueError("SpadeEnvironment needs at least one environment source")
        self._envs = dict(envs)
        self._runtime = runtime
        self._default_env_id = env_id
        self._env = None
        self._state = SpadeState()

    def _choose(self, env_id):
        env_id = env_id if env_id is not None else self._default_env_id
        if env_id is None:
            if len(self._envs) != 1:
                raise ValueError(f"reset names no env_id and there are {len(self._envs)} "
                                 f"environments: {', '.join(sorted(self._envs))}")
            env_id = next(iter(self._envs))
        if env_id not in self._envs:
            raise ValueError(f"unknown env_id {env_id!r}: known are {', '.join(sorted(self._envs))}")
        return env_id

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None,
              env_id: Optional[str] = None, max_turns: Optional[int] = None,
              **kwargs: Any) -> SpadeObservation:
        env_id = self._choose(env_id)
        seed = 0 if seed is None else seed
        self.close()
        if self._runtime is None:
            from . import default_runtime

            self._runtime = default_runtime()
        self._env = self._runtime.load(self._envs[env_id], seed=seed, max_turns=max_turns)
        text, info = self._env.reset(seed)
        self._state = SpadeState(episode_id=episode_id or str(uuid.uuid4()), step_count=0,
                                 env_id=env_id, seed=seed)
        return SpadeObservation(text=text, info=info, done=False, reward=None)

    def step(self, action: SpadeAction, timeout_s: Optional[float] = None,
             **kwargs: Any) -> SpadeObservation:
        if self._env is None:
            raise RuntimeError("call reset() before step()")
        if self._state.done:
            return SpadeObservation(text="The episode is over.", done=True, reward=0.0)
        self._state.step_count += 1
        try:
            text, reward, terminated, truncated, info = self._env.step(action.message)
        except errors.SpadeError as err:
            self._state.done = True
            return SpadeObservation(
                text=f"The episode ended with an error ({err.kind}): {err.detail}", done=True,
                reward=0.0, error={"kind": err.kind, "message": err.detail},
            )
        self._state.done = terminated or truncated
        return SpadeObservation(text=text, info=info, terminated=terminated,
                                truncated=truncated, done=self._state.done, reward=reward)

    @property
    def state(self) -> SpadeState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="spade",
            description="Model-written Python environments in spade's WebAssembly sandbox: "
                        + ", ".join(sorted(self._envs)),
            version="0.1.0",
        )

    def close(self) -> None:
        env, self._env = self._env, None
        if env is not None:
            try:
                env.close()
            except errors.SpadeError:
                pass


def create_app(envs: Dict[str, str], max_concurrent_envs: int = 64,
               env_id: Optional[str] = None):
    """OpenEnv's FastAPI app (`openenv.core.env_server.create_app`) over `SpadeEnvironment`,
    one instance per session, at most `max_concurrent_envs` at once."""
    from openenv.core.env_server.http_server import create_app as openenv_create_app

    return openenv_create_app(
        functools.partial(SpadeEnvironment, dict(envs), env_id=env_id),
        SpadeAction, SpadeObservation, env_name="spade",
        max_concurrent_envs=max_concurrent_envs, state_cls=SpadeState,
    )


class SpadeMCPEnvironment(MCPEnvironment):
    """A tool-use environment as OpenEnv's `MCPEnvironment`: the tools of the environment
    reset last (`spade.Env.tools`), plus `answer` unless it has a tool of that name, are MCP
    tools, so `tools/list` and `tools/call` (OpenEnv's `/mcp`, or `ListToolsAction` and
    `CallToolAction` given to `step`) list and call them, and any other step (`SpadeAction`)
    is `SpadeEnvironment`'s. Tools and `answer` are `spade serve`'s MCP mode's.

    A call is played as the step `<tool_call>{"name": ..., "arguments": ...}</tool_call>`
    (`answer`: `<answer>...</answer>`), one turn of `max_turns`; its result is that step:
    `{"observation", "reward", "terminated", "truncated", "info"}` as structured content (what
    `MCPToolClient.call_tool` returns), the text as text content. A tool that raised answers
    as the environment answers it (`Error calling ...`), as in `spade run`. A call that ends
    the episode with an error (an exception, a contract error, a sandbox limit), comes after
    the episode ended or gives `answer` bad arguments is an MCP tool error with the reason; a
    name the environment has no tool for is refused by FastMCP (`Unknown tool`). Neither of
    the last two plays a turn. Before the first `reset` there are no tools.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, envs: Dict[str, str], runtime=None, env_id: Optional[str] = None):
        self._inner = SpadeEnvironment(envs, runtime=runtime, env_id=env_id)
        self._lock = threading.Lock()
        self._tool_names: list = []
        super().__init__(FastMCP("spade"))

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None,
              env_id: Optional[str] = None, max_turns: Optional[int] = None,
              **kwargs: Any) -> SpadeObservation:
        with self._lock:
            obs = self._inner.reset(seed=seed, episode_id=episode_id, env_id=env_id,
                                    max_turns=max_turns)
            try:
                self._register_tools(self._inner._env.tools or [])
            except ValueError:
                self._inner.close()
                raise
        return obs

    def _register_tools(self, schemas):
        functions = [schema.get("function", schema) for schema in schemas]
        for function in functions:
            if function["name"] in RESERVED_TOOL_NAMES:
                raise ValueError(f"the environment's tool {function['name']!r} has a name "
                                 f"OpenEnv reserves ({', '.join(sorted(RESERVED_TOOL_NAMES))})")
        if all(function["name"] != _ANSWER["name"] for function in functions):
            functions.append(_ANSWER)
        server = self._require_mcp_server()
        for name in self._tool_names:
            server.local_provider.remove_tool(name)
        self._tool_names = []
        for function in functions:
            tool = _SpadeTool(name=function["name"],
                              description=function.get("description") or "",
                              parameters=function.get("parameters") or {"type": "object"})
            tool._call = functools.partial(self._call_tool, function["name"],
                                           function is _ANSWER)
            server.add_tool(tool)
            self._tool_names.append(function["name"])

    def _call_tool(self, name: str, is_answer: bool, arguments: Dict[str, Any]) -> Dict[str, Any]:
        """Plays one call as a step; raises `fastmcp.exceptions.ToolError` for an error."""
        if is_answer:
            reply = f"<answer>{_answer_text(arguments)}</answer>"
        else:
            payload = json.dumps({"name": name, "arguments": arguments})
            # `<` only occurs inside JSON strings; escaped, no argument can close the tag.
            reply = "<tool_call>" + payload.replace("<", "\\u003c") + "</tool_call>"
        with self._lock:
            if self._inner.state.done:
                raise ToolError("The episode is over.")
            obs = self._inner.step(SpadeAction(message=reply))
        if obs.error is not None:
            raise ToolError(obs.text)
        return {"observation": obs.text, "reward": obs.reward, "terminated": obs.terminated,
                "truncated": obs.truncated, "info": obs.info}

    def _step_impl(self, action: SpadeAction, timeout_s: Optional[float] = None,
                   **kwargs: Any) -> SpadeObservation:
        with self._lock:
            return self._inner.step(action)

    @property
    def state(self) -> SpadeState:
        return self._inner.state

    def get_metadata(self) -> EnvironmentMetadata:
        return self._inner.get_metadata()

    def close(self) -> None:
        self._inner.close()
        super().close()


_ANSWER = {
    "name": "answer",
    "description": "Give the final answer (the environment's <answer>...</answer> reply); "
                   "a correct one ends the episode.",
    "parameters": {"type": "object", "required": ["answer"],
                   "properties": {"answer": {"type": "string", "description": "the final answer"}}},
}


def _answer_text(arguments: Dict[str, Any]) -> str:
    """The `answer` tool's argument, checked as `spade serve` checks it."""
    if "answer" not in arguments:
        raise ToolError("the answer tool needs the argument 'answer' (the final answer)")
    answer = arguments["answer"]
    extra = [key for key in arguments if key != "answer"]
    if extra:
        raise ToolError(f"the answer tool takes only 'answer', not '{extra[0]}'")
    if isinstance(answer, str):
        return answer
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        return json.dumps(answer)
    raise ToolError("the answer tool's argument 'answer' must be a string or a number, not "
                    f"{_JSON_TYPES.get(type(answer), type(answer).__name__)}")


_JSON_TYPES = {bool: "a boolean", list: "an array", dict: "an object", type(None): "null"}


class _SpadeTool(Tool):
    """One tool of a spade environment; `run` plays the call in a worker thread."""

    _call: Any = PrivateAttr(default=None)

    async def run(self, arguments: Dict[str, Any]) -> ToolResult:
        result = await anyio.to_thread.run_sync(self._call, dict(arguments))
        return ToolResult(content=[TextContent(type="text", text=result["observation"])],
                          structured_content=result)


def create_mcp_app(envs: Dict[str, str], max_concurrent_envs: int = 64,
                   env_id: Optional[str] = None, runtime=None):
    """OpenEnv's FastAPI app over `SpadeMCPEnvironment` (tool-use environments): `/mcp`
    answers `tools/list` and `tools/call` in the session of OpenEnv's `MCPToolClient`."""
    from openenv.core.env_server.http_server import create_app as openenv_create_app

    return openenv_create_app(
        functools.partial(SpadeMCPEnvironment, dict(envs), runtime=runtime, env_id=env_id),
        SpadeAction, SpadeObservation, env_name="spade",
        max_concurrent_envs=max_concurrent_envs, state_cls=SpadeState,
    )


__all__ = ["SpadeEnvironment", "SpadeMCPEnvironment", "SpadeAction", "SpadeObservation",
           "SpadeState", "create_app", "create_mcp_app"]
