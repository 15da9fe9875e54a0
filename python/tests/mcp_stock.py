"""Play a tool-use environment through `spade serve` with OpenEnv's stock MCP client
(`openenv.core.mcp_client.MCPToolClient`, production mode: a session created over POST /mcp,
the WebSocket attached to it with /ws?session_id=, tools listed and called over HTTP /mcp).

argv: url env_id seed
Plays: list the tools; reset; call get_price and get_stock on the task's item (the reset's info
names it); answer price x stock with the `answer` tool through step(CallToolAction), which
returns the reward; close. Prints one JSON object with what it saw.
"""

import json
import sys

from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.mcp_client import MCPToolClient

url, env_id, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
seen = {}

with MCPToolClient(base_url=url).sync() as env:
    seen["session_id"] = env._production_session_id
    reset = env.reset(env_id=env_id, seed=seed)
    item = reset.observation.info["target"]
    seen["reset_text"] = reset.observation.text
    seen["tools"] = [tool.name for tool in env.list_tools()]
    seen["price_text"] = env.call_tool("get_price", item=item)
    seen["stock_text"] = env.call_tool("get_stock", item=item)
    price = float(seen["price_text"].split("\n")[1])
    stock = int(seen["stock_text"].split("\n")[1])
    answer = f"{price * stock:.2f}"
    seen["answer"] = answer
    result = env.step(CallToolAction(tool_name="answer", arguments={"answer": answer}))
    seen["answer_result"] = result.observation.result
    seen["answer_reward"] = result.reward
    seen["answer_done"] = result.done
    try:
        env.call_tool("get_price", item=item)
        seen["after_end"] = None
    except RuntimeError as err:
        seen["after_end"] = str(err)

print(json.dumps(seen))
