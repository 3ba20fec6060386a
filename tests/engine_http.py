"""engine_http.py: what the tests' stand-in engines (sidecar_engine.py,
e2e_engine.py) share: a JSON request handler and a server on a free
loopback port that it writes to a file. Standard library only."""
import http.server
import json
import os
import sys


class JsonHandler(http.server.BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive; self.server.engine is the engine."""
    protocol_version = "HTTP/1.1"
    extra_headers = ()  # (name, value) pairs on every reply

    def reply(self, code, obj):
        body = (json.dumps(obj) + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in self.extra_headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def body(self):
        """The request's JSON body ({} when empty), or None if not JSON."""
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return None

    def not_found(self):
        self.reply(404, {"error": "no such endpoint: " + self.path})

    def log_message(self, fmt, *args):
        sys.stderr.write("engine: " + (fmt % args) + "\n")


def serve(handler, engine, port_file):
    """Serves HANDLER on 127.0.0.1, a free port, written to PORT_FILE
    (whole, by a rename) once listening; never returns."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    srv.engine = engine
    with open(port_file + ".tmp", "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.replace(port_file + ".tmp", port_file)
    srv.serve_forever()
