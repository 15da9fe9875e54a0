class 在庫価値Env(ToolUseBaseEnv):
    """Tool use with non-ASCII text everywhere: the value of one item's stock. The class and
    tool names are Japanese and German, the items carry accents, a combining mark and emoji,
    and the info holds a ZWJ emoji sequence and a NUL character."""

    PRICES = {"りんご": 1.25, "Birne": 0.5, "🍑": 3.0, "café": 2.0, "e\u0301clair": 4.5}
    STOCK = {"りんご": 12, "Birne": 30, "🍑": 7, "café": 3, "e\u0301clair": 2}

    def __init__(self, max_turns=8):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        super().reset(seed)
        self._tools = {
            "価格": {
                "description": "一個の値段（ドル）",
                "parameters": {"type": "object", "properties": {"品目": {"type": "string"}}, "required": ["品目"]},
            },
            "größe_des_lagers": {
                "description": "Stückzahl im Lager 📦",
                "parameters": {"type": "object", "properties": {"品目": {"type": "string"}}, "required": ["品目"]},
            },
        }
        items = list(self.PRICES)
        self.target = items[(seed or 0) % len(items)]
        self._state = {"prices": self.PRICES, "stock": self.STOCK}
        self._expected_answer = round(self.PRICES[self.target] * self.STOCK[self.target], 2)
        obs = f"「{self.target}」の在庫の合計金額は？ 🧮 Werkzeuge: {', '.join(self._tools)}"
        return obs, {"目標": self.target, "家族": "👩\u200d👩\u200d👧", "nul": "a\x00b"}

    def tool_価格(self, 品目):
        if 品目 not in self.PRICES:
            raise KeyError(f"未知の品目 {品目!r}")
        return self.PRICES[品目]

    def tool_größe_des_lagers(self, 品目):
        return self.STOCK[品目]
