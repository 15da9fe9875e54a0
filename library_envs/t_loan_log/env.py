import json
import random


class LoanLogEnv(ToolUseBaseEnv):
    """Tool use: read a library's loan log page by page to find who holds a book."""

    BOOKS = ["Dune", "Emma", "Ulysses", "Beloved", "Walden"]
    MEMBERS = ["rosa", "omar", "lena", "taro", "mia"]

    def __init__(self, max_turns=10):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        super().reset(seed)
        self._tools = {
            "read_page": {
                "description": "The loan events on one page of the log, oldest first.",
                "parameters": {
                    "type": "object",
                    "properties": {"page": {"type": "integer"}},
                    "required": ["page"],
                },
            },
        }
        holder, events = {}, []
        while len(events) < 12 or not holder:
            book = random.choice(self.BOOKS)
            if book in holder:
                events.append(holder.pop(book) + " returns " + book)
            else:
                holder[book] = random.choice(self.MEMBERS)
                events.append(holder[book] + " borrows " + book)
        pages = [events[i:i + 3] for i in range(0, len(events), 3)]
        self._state = {"pages": pages}
        book = random.choice(sorted(holder))
        self._expected_answer = holder[book]
        obs = (
            "The loan log has " + str(len(pages)) + " pages (numbered from 1). "
            "Who has the book " + book + " right now? Answer with the member's name. "
            "Tools: " + json.dumps(self.get_tools())
        )
        return obs, {"book": book}

    def tool_read_page(self, page):
        pages = self._state["pages"]
        if not isinstance(page, int) or not 1 <= page <= len(pages):
            raise ValueError("page must be from 1 to " + str(len(pages)))
        return "\n".join(pages[page - 1])
