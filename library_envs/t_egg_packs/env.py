import json
import random


class EggPacksEnv(ToolUseBaseEnv):
    """Tool use: buy an exact number of eggs from packs of different sizes at least cost."""

    def __init__(self, max_turns=8):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        super().reset(seed)
        self._tools = {
            "get_price": {
                "description": "The price in dollars of one pack of the given size.",
                "parameters": {
                    "type": "object",
                    "properties": {"size": {"type": "integer"}},
                    "required": ["size"],
                },
            },
        }
        sizes = [1] + sorted(random.sample(range(3, 13), 2))
        unit = random.randint(2, 3)
        prices = {1: unit}
        for s in sizes[1:]:
            prices[s] = s * unit - random.randint(1, s)
        need = random.randint(14, 40)
        best = [0] + [None] * need
        for n in range(1, need + 1):
            best[n] = min(best[n - s] + prices[s] for s in sizes if s <= n)
        self._state = {"prices": prices}
        self._expected_answer = best[need]
        obs = (
            "A shop sells eggs in packs of " + ", ".join(str(s) for s in sizes)
            + ". What is the least you can pay for exactly " + str(need)
            + " eggs? Answer in dollars. Tools: " + json.dumps(self.get_tools())
        )
        return obs, {"need": need}

    def tool_get_price(self, size):
        if size not in self._state["prices"]:
            raise KeyError("no pack of size " + repr(size))
        return self._state["prices"][size]
