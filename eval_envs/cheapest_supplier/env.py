class CheapestSupplierEnv(ToolUseBaseEnv):
    """Tool use: find the supplier with the lowest quote for a part."""

    SUPPLIERS = ["acme", "globex", "initech", "umbrella"]

    def __init__(self, max_turns=8, **kwargs):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        super().reset(seed)
        self._tools = {
            "list_suppliers": {
                "description": "Names of the suppliers.",
                "parameters": {"type": "object", "properties": {}},
            },
            "get_quote": {
                "description": "A supplier's price for the part, in dollars.",
                "parameters": {
                    "type": "object",
                    "properties": {"supplier": {"type": "string"}},
                    "required": ["supplier"],
                },
            },
        }
        prices = random.sample(range(20, 200), len(self.SUPPLIERS))
        self._state = {"quotes": dict(zip(self.SUPPLIERS, prices))}
        best = min(self._state["quotes"], key=self._state["quotes"].get)
        self._expected_answer = best
        obs = (
            "Which supplier offers the lowest price for the part? Answer with the supplier's name. "
            f"Tools: {json.dumps(self.get_tools())}"
        )
        return obs, {}

    def tool_list_suppliers(self):
        return ", ".join(self.SUPPLIERS)

    def tool_get_quote(self, supplier):
        return self._state["quotes"][supplier]
