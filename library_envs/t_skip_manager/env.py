import json
import random


class SkipManagerEnv(ToolUseBaseEnv):
    """Tool use: find the manager of an employee's manager in a directory."""

    NAMES = ["ana", "ben", "cara", "dev", "eli", "fay", "gus", "hana", "ivan", "jo"]

    def __init__(self, max_turns=8):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        super().reset(seed)
        self._tools = {
            "get_manager": {
                "description": "The direct manager of an employee, or 'none' for the CEO.",
                "parameters": {
                    "type": "object",
                    "properties": {"employee": {"type": "string"}},
                    "required": ["employee"],
                },
            },
        }
        people = random.sample(self.NAMES, 8)
        managers = {people[0]: "none", people[1]: people[0], people[2]: people[1]}
        for i in range(3, len(people)):
            managers[people[i]] = people[random.randint(0, i - 1)]
        self._state = {"managers": managers}
        target = random.choice([p for p in people[2:] if managers[p] != people[0]])
        self._expected_answer = managers[managers[target]]
        obs = (
            "Who is the manager of " + target + "'s manager? "
            "Answer with the employee's name. "
            "Tools: " + json.dumps(self.get_tools())
        )
        return obs, {"target": target}

    def tool_get_manager(self, employee):
        if employee not in self._state["managers"]:
            raise KeyError("no employee named " + repr(employee))
        return self._state["managers"][employee]
