"""Typed client for `spade serve` on top of OpenEnv's `EnvClient`, and spade's HTTP extensions."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient


class SpadeServerError(RuntimeError):
    """An error answer from the server.

    `code` is OpenEnv's error code (`VALIDATION_ERROR`, `EXECUTION_ERROR`, `CAPACITY_REACHED`,
    ...), `kind` the sandbox outcome when the environment or its sandbox failed (`exception`,
    `contract`, `out_of_fuel`, `deadline`, `memory_limit`, ...). A subclass of `RuntimeError`,
    which is what stock OpenEnv clients raise.
    """

    def __init__(self, message: str, code: str, kind: Optional[str] = None, data: Optional[dict] = None):
        super().__init__(f"Server error: {message} (code: {code})")
        self.message = message
        self.code = code
        self.kind = kind
        self.data = data or {}


@dataclass(frozen=True)
class SpadeAction:
    """The action: the model's reply, passed to the environment's `step()`."""

    message: str


@dataclass(frozen=True)
class SpadeObservation:
    """What `reset` and `step` return."""

    text: str
    info: Dict[str, Any]
    terminated: bool
    truncated: bool
    env_id: str
    episode_id: str
    step_count: int
    fuel: int


@dataclass(frozen=True)
class SpadeState:
    """The session's state."""

    episode_id: Optional[str]
    step_count: int
    env_id: Optional[str]
    seed: Optional[int]
    done: bool
    session_id: Optional[str]


@dataclass(frozen=True)
class Registration:
    """A registered environment source and its `spade check` verdict."""

    id: str
    accepted: bool
    class_name: Optional[str]
    sha256: str
    verdict: Dict[str, Any] = field(default_factory=dict)

    @property
    def error_codes(self) -> List[str]:
        return [f["code"] for f in self.verdict.get("findings", []) if f.get("severity") == "error"]


def _auth_headers(token: Optional[str]) -> Optional[Dict[str, str]]:
    return {"Authorization": f"Bearer {token}"} if token else None


class SpadeEnv(EnvClient[SpadeAction, SpadeObservation, SpadeState]):
    """A session on a `spade serve` server.

    ```python
    with SpadeEnv(base_url="http://127.0.0.1:8000").sync() as env:
        result = env.reset(env_id="grid_walk", seed=7, hint="go right first")
        while not result.done:
            result = env.step(SpadeAction(r"\\boxed{right}"))
    ```

    `reset` takes spade's reset fields: `env_id` (optional with one registered environment),
    `seed` (default 0), `hint`, `max_turns`, `episode_id`. `step` takes a `SpadeAction` or a
    plain string. Errors raise `SpadeServerError`.
    """

    def __init__(self, base_url: str, token: Optional[str] = None, **kwargs: Any):
        headers = dict(kwargs.pop("headers", None) or {})
        headers.update(_auth_headers(token) or {})
        super().__init__(base_url=base_url, headers=headers or None, **kwargs)
        self._token = token

    def _create_session_client(self) -> "SpadeEnv":
        return SpadeEnv(base_url=self._base_url, token=self._token)

    def _step_payload(self, action: Union[SpadeAction, str]) -> Dict[str, Any]:
        if isinstance(action, str):
            return {"message": action}
        if isinstance(action, SpadeAction):
            return {"message": action.message}
        raise TypeError(f"a spade action is a SpadeAction or a str, not {type(action).__name__}")

    def _parse_result(self, payload: Dict[str, Any]) -> StepResult[SpadeObservation]:
        obs = payload.get("observation", {})
        meta = obs.get("metadata", {})
        observation = SpadeObservation(
            text=obs["text"],
            info=obs["info"],
            terminated=obs["terminated"],
            truncated=obs["truncated"],
            env_id=meta.get("env_id", ""),
            episode_id=meta.get("episode_id", ""),
            step_count=meta.get("step_count", 0),
            fuel=meta.get("fuel", 0),
        )
        return StepResult(
            observation=observation,
            reward=payload.get("reward"),
            done=payload.get("done", False),
            metadata=payload.get("metadata"),
        )

    def _parse_state(self, payload: Dict[str, Any]) -> SpadeState:
        return SpadeState(
            episode_id=payload.get("episode_id"),
            step_count=payload.get("step_count", 0),
            env_id=payload.get("env_id"),
            seed=payload.get("seed"),
            done=payload.get("done", False),
            session_id=payload.get("session_id"),
        )

    async def _send_and_receive(self, message: Dict[str, Any]) -> Dict[str, Any]:
        try:
            return await super()._send_and_receive(message)
        except RuntimeError as err:
            if isinstance(err, SpadeServerError) or not str(err).startswith("Server error:"):
                raise
            raise self._last_error or err from None

    async def _receive(self) -> Dict[str, Any]:
        response = await super()._receive()
        self._last_error = None
        if response.get("type") == "error":
            data = response.get("data", {})
            self._last_error = SpadeServerError(
                data.get("message", "unknown error"), data.get("code", "UNKNOWN"), data.get("kind"), data
            )
        return response

    _last_error: Optional[SpadeServerError] = None

    def register(self, source: str, env_id: Optional[str] = None) -> Registration:
        """Checks `source` with `spade check` on the server and registers it."""
        return register_env(self._base_url, source, env_id, token=self._token)

    def trajectory(self, episode_id: str) -> str:
        """The episode's trajectory file (JSON Lines; needs `spade serve --record-dir`)."""
        return fetch_trajectory(self._base_url, episode_id, token=self._token)


def _http_url(base_url: str) -> str:
    url = base_url.rstrip("/")
    if url.startswith("ws://"):
        return "http://" + url[len("ws://"):]
    if url.startswith("wss://"):
        return "https://" + url[len("wss://"):]
    return url


def _request(base_url: str, method: str, path: str, body: Optional[dict], token: Optional[str]) -> bytes:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(_http_url(base_url) + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    for key, value in (_auth_headers(token) or {}).items():
        request.add_header(key, value)
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.read()
    except urllib.error.HTTPError as err:
        text = err.read().decode("utf-8", "replace")
        try:
            detail = json.loads(text).get("detail", text)
        except ValueError:
            detail = text
        raise SpadeServerError(str(detail), f"HTTP_{err.code}") from None


def register_env(base_url: str, source: str, env_id: Optional[str] = None, token: Optional[str] = None) -> Registration:
    """`POST /envs`: checks and registers an environment source; returns its id and verdict."""
    body = {"source": source}
    if env_id is not None:
        body["id"] = env_id
    answer = json.loads(_request(base_url, "POST", "/envs", body, token))
    return Registration(
        id=answer["id"],
        accepted=answer["accepted"],
        class_name=answer.get("class_name"),
        sha256=answer["sha256"],
        verdict=answer.get("verdict", {}),
    )


def list_envs(base_url: str, token: Optional[str] = None) -> List[Dict[str, Any]]:
    """`GET /envs`: every registered environment and its verdict."""
    return json.loads(_request(base_url, "GET", "/envs", None, token))["envs"]


def fetch_trajectory(base_url: str, episode_id: str, token: Optional[str] = None) -> str:
    """`GET /trajectories/{episode_id}`: the recorded episode (JSON Lines)."""
    return _request(base_url, "GET", f"/trajectories/{episode_id}", None, token).decode("utf-8")
