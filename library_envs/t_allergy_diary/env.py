import json
import random


class AllergyDiaryEnv(ToolUseBaseEnv):
    """Tool use: read a food diary day by day to find the food behind a reaction."""

    FOODS = ["milk", "egg", "wheat", "peanut", "shrimp", "soy", "kiwi", "celery"]

    def __init__(self, max_turns=10):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        super().reset(seed)
        self._tools = {
            "read_day": {
                "description": "What was eaten on one day and whether a reaction followed.",
                "parameters": {
                    "type": "object",
                    "properties": {"day": {"type": "integer"}},
                    "required": ["day"],
                },
            },
        }
        foods = random.sample(self.FOODS, 6)
        cause = random.choice(foods)
        count = random.randint(5, 7)
        while True:
            days = [random.sample(foods, 3) for _ in range(count)]
            fits = [f for f in foods
                    if all((f in d) == (cause in d) for d in days)]
            if fits == [cause]:
                break
        self._state = {"days": days, "cause": cause}
        self._expected_answer = cause
        obs = (
            "The diary covers days 1 to " + str(count) + " and the foods "
            + ", ".join(sorted(foods)) + ". A reaction follows a day exactly when one "
            "particular food was eaten that day. Which food is it? Answer with its name. "
            "Tools: " + json.dumps(self.get_tools())
        )
        return obs, {}

    def tool_read_day(self, day):
        days = self._state["days"]
        if not isinstance(day, int) or not 1 <= day <= len(days):
            raise ValueError("day must be from 1 to " + str(len(days)))
        foods = days[day - 1]
        hit = self._state["cause"] in foods
        return "ate: " + ", ".join(foods) + "; reaction: " + ("yes" if hit else "no")
