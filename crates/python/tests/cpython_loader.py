"""The CPython side of the compat comparison: generated games loaded with `exec`, as the SPADE
reference's `_load_game_from_code` documents it, and played on the given seeds and actions.

Written from the reference's documented behaviour, not copied: the code is executed in a fresh
module's namespace pre-filled with the common standard-library names; the game class is the
first name ending in `Env` (other than `Env` and `ToolUseBaseEnv`); it is instantiated with
`max_turns=max_steps` (or without, then given the attribute); `reset(seed=42)`, the probe steps
and `reset(seed=123)` are run.

Usage: cpython_loader.py < jobs.jsonl > results.jsonl. Run with `python -I -S`, so that
only the standard library and the game's own bundled modules can be imported, as in the
sandbox. Each job is {"name", "source", "episodes": [[seed, reset_fields, [action, ...]], ...],
"max_steps"}; each result is {"name", "error"} or {"name", "class_name", "max_turns",
"episodes": [...]} where an episode is its reset and step results. `random` is seeded with 0
before the code runs, as the sandbox seeds it with the load seed (0 here).
"""

import collections
import copy
import functools
import heapq
import itertools
import json
import math
import random
import re
import statistics
import string
import sys
import types
import typing

INJECTED = {
    "random": random, "re": re, "math": math, "json": json, "itertools": itertools,
    "collections": collections, "functools": functools, "heapq": heapq,
    "statistics": statistics, "copy": copy, "string": string,
}
for _name in typing.__all__:
    _value = getattr(typing, _name, None)
    if _value is not None and not isinstance(_value, types.ModuleType):
        INJECTED[_name] = _value

PROBES = ("\\boxed{1}", "\\boxed{test}", "\\boxed{42}")


def load_game(code, max_steps):
    module = types.ModuleType("dynamic_game")
    sys.modules["dynamic_game"] = module
    for name, value in INJECTED.items():
        module.__dict__.setdefault(name, value)
    random.seed(0)
    try:
        exec(code, module.__dict__)
    except SyntaxError as e:
        raise ValueError(f"Syntax error in generated game code: {e}")
    except Exception as e:
        raise RuntimeError(f"Failed to execute game code: {e}")
    game_class = next(
        (obj for name, obj in module.__dict__.items()
         if name.endswith("Env") and name not in ("Env", "ToolUseBaseEnv") and callable(obj)),
        None,
    )
    if game_class is None:
        raise ValueError("No valid game class found in code (expected class ending with 'Env')")
    try:
        try:
            game = game_class(max_turns=max_steps)
        except TypeError:
            game = game_class()
            if hasattr(game, "max_turns"):
                game.max_turns = max_steps
    except Exception as e:
        raise RuntimeError(f"Failed to instantiate game class: {e}")
    try:
        obs, info = game.reset(seed=42)
    except Exception as e:
        raise RuntimeError(f"Game reset() failed: {e}")
    for i, action in enumerate(PROBES):
        try:
            obs, reward, terminated, truncated, info = game.step(action)
            if reward < -10 or reward > 10:
                raise ValueError(f"step() reward {reward} outside expected range [-10, 10]")
            if terminated or truncated:
                break
        except Exception as e:
            raise RuntimeError(f"Game step() failed on action {i + 1} '{action}': {e}")
    try:
        game.reset(seed=123)
    except Exception as e:
        raise RuntimeError(f"Game reset() failed on second call: {e}")
    return game


def jsonable(info):
    """The info dict as the sandbox hands it over (it travels as JSON)."""
    return json.loads(json.dumps(info))


def play(game, episodes):
    out = []
    for seed, fields, actions in episodes:
        obs, info = game.reset(seed=seed, **fields)
        record = {"reset": [obs, jsonable(info)], "steps": []}
        for action in actions:
            if action is None:
                try:
                    action = game.solution()
                except Exception:
                    record["steps"].append("no solution")
                    continue
            obs, reward, terminated, truncated, info = game.step(action)
            record["steps"].append([obs, float(reward), terminated, truncated, jsonable(info)])
            if terminated or truncated:
                break
        out.append(record)
    return out


def main():
    for line in sys.stdin:
        job = json.loads(line)
        modules, meta_path = set(sys.modules), list(sys.meta_path)
        try:
            game = load_game(job["source"], job["max_steps"])
            result = {
                "name": job["name"],
                "class_name": type(game).__name__,
                "max_turns": getattr(game, "max_turns", None),
                "episodes": play(game, job["episodes"]),
            }
        except Exception as e:
            result = {"name": job["name"], "error": f"{type(e).__name__}: {e}"}
        finally:
            for name in set(sys.modules) - modules:
                del sys.modules[name]
            sys.meta_path[:] = meta_path
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
