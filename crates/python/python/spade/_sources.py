"""How the integrations read an environment named in a task: `rlve:NAME`, a `.py` path, or
the source text itself."""

import pathlib


def resolve_source(env):
    """The environment source of a task's `env`: a `spade run` name (`rlve:NAME`), a path to
    a `.py` file, or the source text itself (anything with a newline)."""
    if not isinstance(env, str) or not env.strip():
        raise ValueError(f"a task's env must be a non-empty string, not {env!r}")
    if "\n" in env:
        return env
    if env.endswith(".py"):
        path = pathlib.Path(env)
        if not path.is_file():
            raise ValueError(f"environment file {env!r} does not exist")
        return path.read_text()
    from . import env_source

    return env_source(env)
