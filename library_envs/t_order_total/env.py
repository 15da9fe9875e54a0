import json
import random


class OrderTotalEnv(ToolUseBaseEnv):
    """Tool use: price a customer order with a discount using lookup tools."""

    ITEMS = ["bolt", "nut", "washer", "hinge", "spring", "bracket", "rivet"]

    def __init__(self, max_turns=10):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        super().reset(seed)
        self._tools = {
            "get_order": {
                "description": "The order's lines (item: quantity) and its discount in percent.",
                "parameters": {
                    "type": "object",
                    "properties": {"order_id": {"type": "string"}},
                    "required": ["order_id"],
                },
            },
            "get_unit_price": {
                "description": "Price of one unit of an item, in dollars.",
                "parameters": {
                    "type": "object",
                    "properties": {"item": {"type": "string"}},
                    "required": ["item"],
                },
            },
        }
        lines = {item: random.randint(1, 12) for item in random.sample(self.ITEMS, 3)}
        self.order_id = "ORD-" + str(random.randint(100, 999))
        self._state = {
            "order": {"lines": lines, "discount_percent": random.choice([0, 5, 10, 20])},
            "prices": {item: round(random.uniform(0.2, 9.0), 2) for item in self.ITEMS},
        }
        order = self._state["order"]
        gross = sum(q * self._state["prices"][i] for i, q in lines.items())
        self._expected_answer = round(gross * (100 - order["discount_percent"]) / 100, 2)
        obs = (
            "What does order " + self.order_id + " cost in dollars after its discount? "
            "Tools: " + json.dumps(self.get_tools())
        )
        return obs, {"order_id": self.order_id}

    def tool_get_order(self, order_id):
        if order_id != self.order_id:
            raise KeyError("no order " + repr(order_id))
        return json.dumps(self._state["order"])

    def tool_get_unit_price(self, item):
        return self._state["prices"][item]
