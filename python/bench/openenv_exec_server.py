"""OpenEnv 0.10's own Python server hosting a spade environment source by `exec()` under
CPython, with no sandbox: the SPADE reference's way of running generated code. The
benchmark's baseline.

argv: env.py port max_sessions
It speaks the same action/observation fields as `spade serve` ({"message"} in; text, info,
terminated, truncated out), so one client drives both.
"""

import os
import sys
from typing import Any, Dict

import uvicorn
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "guest", "python"))
import spade_prelude  # noqa: E402  (injects the same stdlib names the sandbox does, then exec()s)

env_file, port, max_sessions = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
SOURCE = open(env_file, encoding="utf-8").read()


class MessageAction(Action):
    message: str


class TextObservation(Observation):
    text: str = ""
    info: Dict[str, Any] = {}
    terminated: bool = False
    truncated: bool = False


class ExecEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self._env = None
        self._state = State(step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs) -> TextObservation:
        seed = 0 if seed is None else seed
        self._env, _ = spade_prelude.load(SOURCE, None, seed)
        obs, info = self._env.reset(seed=seed)
        self._state = State(episode_id=episode_id, step_count=0)
        return TextObservation(text=obs, info=info, done=False, reward=None)

    def step(self, action: MessageAction, **kwargs) -> TextObservation:
        obs, reward, terminated, truncated, info = self._env.step(action.message)
        self._state.step_count += 1
        return TextObservation(
            text=obs, info=info, terminated=terminated, truncated=truncated,
            done=terminated or truncated, reward=reward,
        )

    @property
    def state(self) -> State:
        return self._state


app = create_app(ExecEnvironment, MessageAction, TextObservation, max_concurrent_envs=max_sessions)
print(f"openenv exec server: listening on http://127.0.0.1:{port}", flush=True)
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", ws_max_size=16 << 20)
