"""A loopback HTTP server for the provisioning tests, run as its own process (stopped by PID).

    python3 loopback_server.py BODY MODE PORT_FILE LOG

Serves BODY's bytes for any GET on 127.0.0.1 at a free port (written to PORT_FILE once listening)
and appends one line per request to LOG. MODE: ``good``; ``truncate`` (announces the whole length,
sends half, closes); ``die`` (sends half, then the process kills itself mid-transfer).
"""
from __future__ import annotations

import http.server
import os
import signal
import sys
from pathlib import Path

BODY, MODE, PORT_FILE, LOG = Path(sys.argv[1]).read_bytes(), sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        with LOG.open("a") as log:
            log.write(self.path + "\n")
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        if MODE == "good":
            self.wfile.write(BODY)
            return
        self.wfile.write(BODY[: len(BODY) // 2])
        self.wfile.flush()
        if MODE == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
tmp = PORT_FILE.with_suffix(".tmp")
tmp.write_text(str(server.server_address[1]))
tmp.rename(PORT_FILE)
server.serve_forever()
