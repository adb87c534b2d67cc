"""A tiny stand-in for a vLLM ``/metrics`` endpoint (tests only): every GET answers the next
exposition text of a script, so counters move between scrapes as a serving vLLM's do."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def histogram(name: str, series: dict[str, tuple[float, float]]) -> str:
    """One histogram in the text format: ``series`` maps a model name to (sum, count)."""
    lines = [f"# HELP {name} test histogram", f"# TYPE {name} histogram"]
    for model, (total, count) in series.items():
        labels = f'engine="0",model_name="{model}"'
        lines.append(f'{name}_bucket{{{labels},le="0.1"}} {count}')
        lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {count}')
        lines.append(f"{name}_count{{{labels}}} {count}")
        lines.append(f"{name}_sum{{{labels}}} {total}")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def serving_metrics(text_of: Callable[[int], str]) -> Iterator[tuple[str, list[int]]]:
    """Serve ``GET /metrics``: the n-th GET (0-based) answers ``text_of(n)``. Yields the URL and
    the list of scrapes served so far (their numbers)."""
    served: list[int] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/metrics":
                self.send_error(404)
                return
            with lock:
                n = len(served)
                served.append(n)
            body = text_of(n).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics", served
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
