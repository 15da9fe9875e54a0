"""`ToolUseBaseEnv`: the base class of tool-use environments, as the SPADE reference loader provides it.

Generated tool-use environments subclass it without importing it: the sandbox puts the name in
every environment module's namespace. Subclasses set `self._tools` (name -> {description,
parameters}), `self._state` and `self._expected_answer` in `reset`, and define one method
`tool_<name>(**kwargs)` per tool.
"""

import json
import random
import re

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def _as_number(text):
    try:
        return float(str(text).strip().replace("$", "").replace(",", ""))
    except (TypeError, ValueError):
        return None


class ToolUseBaseEnv:
    """Base class for tool-use environments (actions are `<tool_call>` JSON or `<answer>` tags)."""

    def __init__(self, max_turns=10, **kwargs):
        self.max_turns = max_turns
        self.turn_count = 0
        self._tools = {}
        self._state = {}
        self._expected_answer = None
        self._call_history = []

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.turn_count = 0
        self._call_history = []
        return self._task_observation(), {}

    def _task_observation(self):
        names = ", ".join(self._tools) or "(none)"
        return (
            "Use the tools to find the answer. Call a tool with "
            '<tool_call>{"name": ..., "arguments": {...}}</tool_call> and give the final answer '
            f"as <answer>...</answer>. Available tools: {names}."
        )

    def get_tools(self):
        """OpenAI function schemas for the tools this environment offers."""
        return [
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": spec.get("description", ""),
                    "parameters": spec.get("parameters", {"type": "object", "properties": {}}),
                },
            }
            for name, spec in self._tools.items()
        ]

    def solution(self):
        return str(self._expected_answer)

    def close(self):
        pass

    def _obs_suffix(self):
        return ""

    def _check_answer(self, answer):
        expected = self._expected_answer
        if expected is None:
            return False
        given, wanted = str(answer).strip(), str(expected).strip()
        if given.lower() == wanted.lower():
            return True
        a, b = _as_number(given), _as_number(wanted)
        return a is not None and b is not None and abs(a - b) < 0.01

    def _incorrect_answer_feedback(self):
        feedback = "Incorrect answer."
        messages = getattr(self, "_user_messages", None)
        current = getattr(self, "_current_msg", None)
        if isinstance(messages, list) and isinstance(current, int) and 0 <= current < len(messages):
            feedback += f" Pending request {current + 1}/{len(messages)}: {messages[current]}"
        return feedback

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        action = str(action)
        answer = _ANSWER_RE.search(action)
        if answer is not None:
            if self._check_answer(answer.group(1).strip()):
                return "Correct!", 1.0, True, False, {}
            feedback = self._incorrect_answer_feedback()
            if truncated:
                feedback += f"\nThe correct answer was: {self.solution()}"
            return feedback + self._obs_suffix(), 0.0, False, truncated, {}
        call = _TOOL_CALL_RE.search(action)
        if call is None:
            return (
                "Format error: use <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call> "
                "to call a tool or <answer>...</answer> to answer." + self._obs_suffix(),
                -0.1, False, truncated, {},
            )
        try:
            payload = json.loads(call.group(1).strip())
            name = payload["name"]
            arguments = payload.get("arguments", {})
            if isinstance(arguments, str):
                arguments = json.loads(arguments)
            if not isinstance(name, str) or not isinstance(arguments, dict):
                raise ValueError("name must be a string and arguments an object")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return (
                f"Format error: the tool call is not valid JSON with a name and arguments ({exc})."
                + self._obs_suffix(),
                -0.1, False, truncated, {},
            )
        if name not in self._tools:
            available = ", ".join(self._tools)
            return (
                f"Unknown tool '{name}'. Available tools: {available}." + self._obs_suffix(),
                0.0, False, truncated, {},
            )
        self._call_history.append({"name": name, "arguments": arguments})
        try:
            result = getattr(self, f"tool_{name}")(**arguments)
        except Exception as exc:
            return f"Error calling {name}: {exc}" + self._obs_suffix(), 0.0, False, truncated, {}
        return f"Tool result:\n{result}" + self._obs_suffix(), 0.0, False, truncated, {}
