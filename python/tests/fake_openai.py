"""A tiny OpenAI-compatible chat server that answers from a script, for the verifiers tests.

The reply to a request is `SCRIPT[k]`, k the number of assistant messages already in the
conversation (so every rollout gets the same replies, in order, whatever the interleaving);
past the script's end it answers the last line. `/v1/chat/completions` (JSON, or server-sent
events with `stream: true`) and `/v1/models`.
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def start(script, model="fake"):
    """Starts the server on a free port; returns `(base_url, server)` (`server.requests` counts
    the completions served; `server.shutdown()` stops it)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, code, body, content_type="application/json"):
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path.rstrip("/").endswith("/models"):
                self._send(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self):
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            turn = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
            text = script[min(turn, len(script) - 1)]
            with lock:
                server.requests += 1
            created = int(time.time())
            usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
            if body.get("stream"):
                chunks = [
                    {"id": "c", "object": "chat.completion.chunk", "created": created,
                     "model": model, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                   "content": text}, "finish_reason": None}]},
                    {"id": "c", "object": "chat.completion.chunk", "created": created,
                     "model": model, "choices": [{"index": 0, "delta": {},
                                                   "finish_reason": "stop"}], "usage": usage},
                ]
                data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
                self._send(200, data + b"data: [DONE]\n\n", "text/event-stream")
                return
            self._send(200, {
                "id": f"chatcmpl-{server.requests}", "object": "chat.completion",
                "created": created, "model": model,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": usage,
            })

    lock = threading.Lock()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.requests = 0
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/v1", server
