import json
import random


class BankBalanceEnv(ToolUseBaseEnv):
    """Tool use: work out a closing balance from a bank statement read page by page."""

    KINDS = ["salary", "refund", "rent", "groceries", "fuel", "phone", "cafe"]

    def __init__(self, max_turns=10):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        super().reset(seed)
        self._tools = {
            "read_statement": {
                "description": "The transactions on one page of the statement, oldest first.",
                "parameters": {
                    "type": "object",
                    "properties": {"page": {"type": "integer"}},
                    "required": ["page"],
                },
            },
        }
        opening = random.randint(200, 900)
        balance, lines = opening, []
        for _ in range(random.randint(6, 9)):
            kind = random.choice(self.KINDS)
            amount = random.randint(5, 150)
            sign = 1 if kind in ("salary", "refund") else -1
            balance += sign * amount
            lines.append(kind + ": " + ("+" if sign > 0 else "-") + str(amount))
        pages = [lines[i:i + 3] for i in range(0, len(lines), 3)]
        self._state = {"pages": pages}
        self._expected_answer = balance
        obs = (
            "The account opened the month with " + str(opening) + " dollars. The statement "
            "has " + str(len(pages)) + " pages (numbered from 1). What is the closing "
            "balance in dollars? Tools: " + json.dumps(self.get_tools())
        )
        return obs, {"opening": opening}

    def tool_read_statement(self, page):
        pages = self._state["pages"]
        if not isinstance(page, int) or not 1 <= page <= len(pages):
            raise ValueError("page must be from 1 to " + str(len(pages)))
        return "\n".join(pages[page - 1])
