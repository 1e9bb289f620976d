"""A *scripted* OpenAI-compatible chat endpoint for tests (a real HTTP server, not a model).

Each POST to /v1/chat/completions is answered with the next text of a list, or with what a
function makes of the request body. Tests that use it are about our own logic (parsing, repair,
fallbacks), and say so in their docstrings.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ChatEndpoint:
    def __init__(self, answer: list[str] | Callable[[dict[str, Any]], str]):
        self.answer, self.requests = (list(answer) if isinstance(answer, list) else answer), []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                if callable(outer.answer):
                    text = outer.answer(body)
                else:
                    text = outer.answer.pop(0) if outer.answer else "I cannot help."
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": text},
                                                "finish_reason": "stop"}],
                                   "usage": {"prompt_tokens": 900, "completion_tokens": 300}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
