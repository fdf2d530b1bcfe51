#!/usr/bin/env python3
"""A read-only HTTP server for a zarr store directory, with byte ranges and faults.

    http_store_server.py ROOT [--port N] [--fault PATH=MODE ...]

Serves the files under ROOT with GET and HEAD, honouring `Range: bytes=a-b`, `a-` and
`-n` (206 with Content-Range), as static file servers and CDNs do. It prints
`listening on PORT` on its first line (port 0 picks a free port), then one line per
request, and answers `GET /__stats` with a JSON object: request count per path.

Faults, for the tests of devbuf's object-store client (PATH is the URL path):
  status:CODE       answer every request for PATH with CODE
  status:CODE:N     answer the first N requests with CODE, then serve normally
  truncate          announce the full length, send half the body, close the connection
  stall             accept the request and never answer
"""
import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATS = {}
LOCK = threading.Lock()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--fault", action="append", default=[])
    args = ap.parse_args()
    root = os.path.realpath(args.root)
    faults = {}
    for f in args.fault:
        path, mode = f.split("=", 1)
        faults[path] = mode.split(":")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):
            sys.stdout.write("%s %s\n" % (self.command, self.path))
            sys.stdout.flush()

        def fault(self):
            with LOCK:
                n = STATS.get(self.path, 0) + 1
                STATS[self.path] = n
            mode = faults.get(self.path)
            if not mode:
                return False
            if mode[0] == "status":
                if len(mode) == 3 and n > int(mode[2]):
                    return False
                self.send_response(int(mode[1]))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return True
            if mode[0] == "stall":
                time.sleep(3600)
                return True
            return False

        def do_HEAD(self):
            self.serve(body=False)

        def do_GET(self):
            if self.path == "/__stats":
                with LOCK:
                    body = json.dumps(STATS).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.serve(body=True)

        def serve(self, body):
            if self.fault():
                return
            rel = self.path.split("?", 1)[0].lstrip("/")
            full = os.path.realpath(os.path.join(root, rel))
            if not full.startswith(root + os.sep) or not os.path.isfile(full):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            with open(full, "rb") as fh:
                data = fh.read()
            size = len(data)
            start, end, status = 0, size, 200
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes="):
                a, b = rng[6:].split(",")[0].split("-")
                if a == "":
                    start, end = max(0, size - int(b)), size
                else:
                    start = int(a)
                    end = size if b == "" else min(size, int(b) + 1)
                if start >= size or start >= end:
                    self.send_response(416)
                    self.send_header("Content-Range", "bytes */%d" % size)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 206
            part = data[start:end]
            self.send_response(status)
            self.send_header("Content-Length", str(len(part)))
            self.send_header("Accept-Ranges", "bytes")
            if status == 206:
                self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end - 1, size))
            self.end_headers()
            if not body:
                return
            if faults.get(self.path) == ["truncate"]:
                self.wfile.write(part[: len(part) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(part)

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    sys.stdout.write("listening on %d\n" % server.server_address[1])
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
