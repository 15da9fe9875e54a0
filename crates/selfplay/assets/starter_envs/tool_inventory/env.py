class InventoryValueEnv(ToolUseBaseEnv):
    """Tool use: find the total value of an item in stock using lookup tools."""

    ITEMS = ["apple", "pear", "plum", "fig", "kiwi"]

    def __init__(self, max_turns=8):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        super().reset(seed)
        self._tools = {
            "get_price": {
                "description": "Price of one unit of an item, in dollars.",
                "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
            },
            "get_stock": {
                "description": "Number of units of an item in stock.",
                "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
            },
        }
        self._state = {
            "prices": {item: round(random.uniform(0.5, 5.0), 2) for item in self.ITEMS},
            "stock": {item: random.randint(1, 40) for item in self.ITEMS},
        }
        self.target = random.choice(self.ITEMS)
        self._expected_answer = round(self._state["prices"][self.target] * self._state["stock"][self.target], 2)
        obs = (
            f"What is the total value in dollars of all {self.target}s in stock? "
            f"Tools: {json.dumps(self.get_tools())}"
        )
        return obs, {"target": self.target}

    def tool_get_price(self, item):
        if item not in self._state["prices"]:
            raise KeyError(f"unknown item {item!r}")
        return self._state["prices"][item]

    def tool_get_stock(self, item):
        return self._state["stock"][item]
