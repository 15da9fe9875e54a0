"""The spade sandbox prelude, imported once when the interpreter is pre-initialised.

It builds the namespace every environment module starts from (the names the SPADE reference
loader injects), installs the import guard, and implements `load`.
"""

import collections
import copy
import functools
import gc
import heapq
import itertools
import json
import linecache
import marshal
import math
import random
import re
import statistics
import string
import sys
import traceback
import types
import typing

import math_verify
import spade_tool_use

ENV_FILENAME = "env.py"
ENV_MODULE = "env"

# Modules that exist in the standard library but give no capability inside the sandbox.
# Importing them fails here with a message; the WASI context grants no sockets, files or
# processes either, so this guard is for clear errors, not for security.
_UNAVAILABLE = {
    "socket": "network access", "_socket": "network access", "ssl": "network access",
    "_ssl": "network access",
    "subprocess": "processes", "_posixsubprocess": "processes",
    "multiprocessing": "processes", "_multiprocessing": "processes",
    "ctypes": "native code", "_ctypes": "native code",
}


def _stdlib_names():
    names = getattr(sys, "stdlib_module_names", None)
    return frozenset(names) if names else frozenset()


class LoadError(Exception):
    """The environment source could not be loaded; the message says why."""


class _ImportGuard:
    """A meta-path finder that turns imports the sandbox cannot satisfy into clear errors."""

    stdlib = _stdlib_names()

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if top in _UNAVAILABLE:
            raise ModuleNotFoundError(
                f"module '{fullname}' is not available in the spade sandbox "
                f"(environments run without {_UNAVAILABLE[top]})",
                name=fullname,
            )
        return None


class _MissingModule:
    """The last meta-path finder: nothing else found the module."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if top in _ImportGuard.stdlib:
            return None
        raise ModuleNotFoundError(
            f"No module named '{fullname}': the spade sandbox provides only the Python "
            f"standard library ('{top}' is not part of it)",
            name=fullname,
        )


def _injected():
    names = {
        "random": random, "re": re, "math": math, "json": json, "itertools": itertools,
        "collections": collections, "functools": functools, "heapq": heapq,
        "statistics": statistics, "copy": copy, "string": string,
        "ToolUseBaseEnv": spade_tool_use.ToolUseBaseEnv,
    }
    for name in typing.__all__:
        value = getattr(typing, name, None)
        if value is not None and not isinstance(value, types.ModuleType):
            names[name] = value
    return names


INJECTED = _injected()


def install_import_guard():
    sys.meta_path.insert(0, _ImportGuard)
    sys.meta_path.append(_MissingModule)
    for name in list(sys.modules):
        if name.partition(".")[0] in _UNAVAILABLE:
            del sys.modules[name]


def _find_env_class(module):
    candidates = [
        value for name, value in vars(module).items()
        if name.endswith("Env") and isinstance(value, type) and value.__module__ == ENV_MODULE
    ]
    # A module may define a base class and one concrete environment: keep the most derived.
    leaves = [c for c in candidates if not any(o is not c and issubclass(o, c) for o in candidates)]
    if not leaves:
        raise LoadError(
            "no environment class found: define one class whose name ends in 'Env' "
            "with reset(seed) and step(action)"
        )
    if len(leaves) > 1:
        names = ", ".join(sorted(c.__name__ for c in leaves))
        raise LoadError(f"found {len(leaves)} environment classes ({names}): define exactly one class whose name ends in 'Env'")
    return leaves[0]


def compile_source(source):
    """Compile the environment source to marshalled bytecode; a syntax error is a `LoadError`."""
    try:
        code = compile(source, ENV_FILENAME, "exec")
    except SyntaxError as exc:
        detail = "".join(traceback.format_exception_only(type(exc), exc)).rstrip()
        raise LoadError(f"syntax error in the environment source:\n{detail}") from None
    return marshal.dumps(code)


def exec_module(source, code, seed):
    """Execute compiled environment code as the environment module; return its environment class.

    `seed` seeds the module-global `random` first; with `None` it is left as it is (the host
    seeds it later with `reseed`). Raises `LoadError` (with a traceback for errors raised by the
    source) when the module cannot be loaded or does not define exactly one environment class.
    """
    if seed is not None:
        random.seed(seed)
    module = types.ModuleType(ENV_MODULE)
    module.__file__ = ENV_FILENAME
    module.__dict__.update(INJECTED)
    sys.modules[ENV_MODULE] = module
    linecache.cache[ENV_FILENAME] = (len(source), None, source.splitlines(True), ENV_FILENAME)
    try:
        exec(marshal.loads(code), module.__dict__)
    except ImportError as exc:
        raise LoadError(f"import failed: {exc}\n{traceback.format_exc().rstrip()}") from None
    except Exception:
        raise LoadError(
            f"the environment module raised while loading:\n{traceback.format_exc().rstrip()}"
        ) from None
    cls = _find_env_class(module)
    settle()
    return cls


def settle():
    """Collects garbage, then freezes every object alive now out of later collections.

    Runs once the interpreter has booted and once the environment module has run, in every
    sandbox whatever its load plan. Those objects live as long as the sandbox; a collection
    that walked them again would cost every later call and write to (and so un-share) the
    pages they are on. The collection count starts again from zero after it.
    """
    gc.collect()
    gc.freeze()


def construct(cls, max_turns):
    """Construct the environment class; exceptions raised by the constructor propagate."""
    env = cls(max_turns=max_turns) if max_turns is not None else cls()
    return env, cls.__name__


def load_code(source, code, max_turns, seed):
    """`exec_module` then `construct`."""
    return construct(exec_module(source, code, seed), max_turns)


def reseed(seed):
    """Seeds the module-global `random`: for a source loaded without a seed."""
    random.seed(seed)


_VAR_KEYWORDS = 0x08  # CO_VARKEYWORDS: the function takes **kwargs


def split_reset_fields(env, fields_json):
    """Splits the JSON object `fields_json` by the signature of `env.reset`, as OpenEnv's server
    splits a reset request: `(names, values, dropped)`, the keys `reset` takes by keyword (every
    key when it takes `**kwargs`) with their values, and the names of the rest. `seed` is the
    host's own argument and is always dropped here."""
    fields = json.loads(fields_json)
    if not isinstance(fields, dict):
        raise TypeError("reset fields must be a JSON object")
    reset = env.reset
    func = getattr(reset, "__func__", reset)
    code = getattr(func, "__code__", None)
    if code is None:
        keywords, takes_any = (), False
    else:
        first = code.co_posonlyargcount
        if first == 0 and getattr(reset, "__self__", None) is not None:
            first = 1  # `self` of a bound method
        keywords = code.co_varnames[first:code.co_argcount + code.co_kwonlyargcount]
        takes_any = bool(code.co_flags & _VAR_KEYWORDS)
    names, values, dropped = [], [], []
    for name, value in fields.items():
        if name != "seed" and (takes_any or name in keywords):
            names.append(name)
            values.append(value)
        else:
            dropped.append(name)
    return tuple(names), tuple(values), tuple(dropped)


def load(source, max_turns, seed):
    """`compile_source` then `load_code`: how CPython-side tools load an environment."""
    return load_code(source, compile_source(source), max_turns, seed)


# Ints past CPython's default int_max_str_digits are described by their size: converting one
# to decimal costs time quadratic in its length, and the description is only a message.
_MAX_REPR_BITS = 14_300
# Items of a container looked at before its repr is taken: a larger one is described by its
# length (its repr would be built in full before it is cut to 200 characters).
_MAX_REPR_SCAN = 1_000


def _costly_repr(value):
    """Whether `value` holds such an int, or more items than are scanned."""
    stack, seen = [value], 0
    while stack and seen < _MAX_REPR_SCAN:
        item = stack.pop()
        seen += 1
        if type(item) is int and item.bit_length() > _MAX_REPR_BITS:
            return True
        if type(item) in (list, tuple, set, frozenset):
            stack.extend(itertools.islice(item, _MAX_REPR_SCAN))
        elif type(item) is dict:
            stack.extend(itertools.islice(item.keys(), _MAX_REPR_SCAN))
            stack.extend(itertools.islice(item.values(), _MAX_REPR_SCAN))
    return bool(stack)


def describe(value):
    """A short description of a value for contract errors: its type and a bounded repr."""
    if isinstance(value, int) and value.bit_length() > _MAX_REPR_BITS:
        return f"{type(value).__name__} of {value.bit_length()} bits"
    if type(value) in (list, tuple, set, frozenset, dict) and _costly_repr(value):
        return f"{type(value).__name__} of {len(value)} items"
    try:
        text = repr(value)
    except Exception as exc:
        text = f"<repr raised {type(exc).__name__}>"
    if len(text) > 200:
        text = text[:200] + "..."
    return f"{type(value).__name__} {text}"
