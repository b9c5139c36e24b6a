#!/usr/bin/env python3
"""A local stand-in for the Hugging Face file server, for deltafin's setup tests.

Serves folders as repositories over HF's URL scheme, /{owner}/{name}/resolve/{revision}/{file},
with what clients depend on: Range requests (206, Content-Range, 416), HEAD, HTTP/1.1 keep-alive,
and HF's headers (X-Repo-Commit; for LFS files a 302 to a "CDN" URL carrying X-Linked-Etag = the
content's sha256 and X-Linked-Size; for regular files ETag = the git blob sha1). Faults come from a
JSON control file re-read whenever it changes:

  {"rules": [{"match": "model-00002", "kind": "status", "status": 503, "times": 2}, ...]}

Every rule has "match" (substring of the request path), optional "method" (GET/HEAD), optional
"range_only" (only requests with a Range header), optional "min_range" (only Range requests of
at least that many bytes), "times" (how many requests it hits; -1 = all) and one "kind":
  status        answer "status" (e.g. 500, 503, 429, 404, 403) with a short body
  reset         send "after_bytes" body bytes (default 0, before any header), then a TCP reset
  truncate      send the right headers but only "after_bytes" body bytes, then close
  wrong_length  declare Content-Length + "delta", send min(declared, real) bytes, then close
  wrong_range   serve the range shifted by "shift" bytes and label it so in Content-Range
  no_range      ignore Range: 200 and the whole file
  stall         send "after_bytes" body bytes, then nothing for "seconds" (max 60), then close
  slow          send the body at "rate" bytes per second
  corrupt       flip one byte of the body at "at" (offset within the body)

Each request is logged as one JSON line (method, path, range, status, client port, bytes sent,
fault) to --log. Loopback only; the server exits by itself after --max-seconds.
"""
import argparse
import hashlib
import http.server
import json
import os
import socket
import struct
import sys
import threading
import time
import urllib.parse

LFS_SUFFIXES = (".safetensors", ".bin", ".gguf")
CHUNK = 64 * 1024


class Repo:
    def __init__(self, name, root, commit):
        self.name = name
        self.root = os.path.abspath(root)
        self.commit = commit
        self._hashes = {}
        self._lock = threading.Lock()

    def path_of(self, rel):
        rel = urllib.parse.unquote(rel)
        if rel.startswith("/") or ".." in rel.split("/"):
            return None
        p = os.path.join(self.root, rel)
        return p if os.path.isfile(p) else None

    def hashes(self, path):
        """(sha256 hex, git blob sha1 hex) of a file, computed once."""
        st = os.stat(path)
        key = (path, st.st_size, st.st_mtime_ns)
        with self._lock:
            if key in self._hashes:
                return self._hashes[key]
        sha256 = hashlib.sha256()
        sha1 = hashlib.sha1(b"blob %d\0" % st.st_size)
        with open(path, "rb") as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                sha256.update(b)
                sha1.update(b)
        out = (sha256.hexdigest(), sha1.hexdigest())
        with self._lock:
            self._hashes[key] = out
        return out


class Faults:
    def __init__(self, path, verbose=False):
        self.path = path
        self.verbose = verbose
        self.mtime = None
        self.rules = []
        self.lock = threading.Lock()

    def take(self, method, path, range_header):
        """Returns the first matching rule (consuming one of its uses) or None."""
        with self.lock:
            if self.path:
                try:  # replaced by rename: a new inode, even within one timestamp tick
                    st = os.stat(self.path)
                    mtime = (st.st_mtime_ns, st.st_ino, st.st_size)
                except FileNotFoundError:
                    mtime = None
                if mtime != self.mtime:
                    self.mtime = mtime
                    self.rules = []
                    if mtime is not None:
                        with open(self.path) as f:
                            text = f.read().strip()
                        self.rules = json.loads(text).get("rules", []) if text else []
                    if self.verbose:
                        print("hfserver: fault rules now %s" % json.dumps(self.rules), file=sys.stderr)
            for rule in self.rules:
                if rule.get("times", 1) == 0:
                    continue
                if rule.get("match", "") not in path:
                    continue
                if rule.get("method") and rule["method"] != method:
                    continue
                if rule.get("range_only") and range_header is None:
                    continue
                if "min_range" in rule and range_length(range_header) < rule["min_range"]:
                    continue
                if rule.get("times", 1) > 0:
                    rule["times"] = rule.get("times", 1) - 1
                if self.verbose:
                    print("hfserver: %s %s %s -> %s" % (method, path, range_header, rule["kind"]), file=sys.stderr)
                return dict(rule)
        return None


def range_length(header):
    """Bytes a 'bytes=a-b' header asks for (open-ended: unbounded; none: 0)."""
    if not header or not header.startswith("bytes="):
        return 0
    first, _, last = header[6:].partition("-")
    try:
        return int(last) - int(first) + 1 if first and last else float("inf")
    except ValueError:
        return 0


def parse_range(header, size):
    """(start, end) inclusive for one 'bytes=' range, 'unsatisfiable', or None if absent/invalid."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    first, _, last = header[6:].strip().partition("-")
    try:
        if first == "":
            n = int(last)
            if n <= 0:
                return "unsatisfiable"
            return (max(0, size - n), size - 1)
        start = int(first)
        end = int(last) if last else size - 1
    except ValueError:
        return None
    if start >= size or end < start:
        return "unsatisfiable"
    return (start, min(end, size - 1))


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hfserver/1"

    def log_message(self, fmt, *args):  # the JSON log replaces the default stderr lines
        pass

    def do_GET(self):
        self.handle_any("GET")

    def do_HEAD(self):
        self.handle_any("HEAD")

    # --- helpers ---------------------------------------------------------------------------

    def record(self, status, sent, fault=None, rng=None):
        srv = self.server
        line = {"t": round(time.time() - srv.started, 3), "method": self.command,
                "path": self.path, "range": rng, "status": status,
                "port": self.client_address[1], "sent": sent}
        if fault:
            line["fault"] = fault.get("kind")
        if srv.log_path:
            with srv.log_lock, open(srv.log_path, "a") as f:
                f.write(json.dumps(line) + "\n")

    def reset_connection(self):
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def simple(self, status, body, headers=None, fault=None):
        data = body.encode()
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.record(status, len(data), fault)

    def handle_any(self, method):
        try:
            self.route(method)
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def route(self, method):
        srv = self.server
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.split("/")
        rng_header = self.headers.get("Range")
        fault = srv.faults.take(method, url.path, rng_header)
        if fault and fault["kind"] == "status":
            status = int(fault.get("status", 503))
            hdrs = {"Retry-After": str(fault["retry_after"])} if "retry_after" in fault else {}
            return self.simple(status, "injected fault %d\n" % status, hdrs, fault)
        if fault and fault["kind"] == "reset" and int(fault.get("after_bytes", 0)) == 0:
            self.record(0, 0, fault, rng_header)
            return self.reset_connection()

        # /cdn/{owner}/{name}/{commit}/{file...}: where LFS files redirect to.
        if len(parts) >= 6 and parts[1] == "cdn":
            repo = srv.repos.get(parts[2] + "/" + parts[3])
            if repo is None or parts[4] != repo.commit:
                return self.simple(404, "no such object\n")
            path = repo.path_of("/".join(parts[5:]))
            if path is None:
                return self.simple(404, "no such object\n")
            return self.serve(path, {}, fault)

        # /{owner}/{name}/resolve/{revision}/{file...}
        if len(parts) < 6 or parts[3] != "resolve":
            return self.simple(404, "not a resolve URL\n")
        repo = srv.repos.get(parts[1] + "/" + parts[2])
        if repo is None:
            return self.simple(404, "Repository not found\n", {"X-Error-Code": "RepoNotFound"})
        if srv.token and self.headers.get("Authorization") != "Bearer " + srv.token:
            return self.simple(401, "Invalid credentials in Authorization header\n",
                               {"X-Error-Code": "GatedRepo"})
        if parts[4] not in (repo.commit, "main"):
            return self.simple(404, "Revision Not Found\n", {"X-Error-Code": "RevisionNotFound"})
        rel = "/".join(parts[5:])
        path = repo.path_of(rel)
        if path is None:
            return self.simple(404, "Entry not found\n", {"X-Error-Code": "EntryNotFound"})
        sha256, sha1 = repo.hashes(path)
        size = os.path.getsize(path)
        common = {"X-Repo-Commit": repo.commit}
        if rel.endswith(LFS_SUFFIXES):
            host = self.headers.get("Host", "127.0.0.1")
            location = "http://%s/cdn/%s/%s/%s?expires=%d" % (host, repo.name, repo.commit, rel,
                                                               int(time.time()) + 3600)
            common.update({"Location": location, "X-Linked-Etag": '"%s"' % sha256,
                           "X-Linked-Size": str(size), "ETag": '"%s"' % sha256})
            return self.simple(302, "Found. Redirecting to %s\n" % location, common)
        common["ETag"] = '"%s"' % sha1
        return self.serve(path, common, fault)

    def serve(self, path, headers, fault):
        size = os.path.getsize(path)
        rng_header = self.headers.get("Range")
        kind = fault["kind"] if fault else None
        rng = None if kind == "no_range" else parse_range(rng_header, size)
        if rng == "unsatisfiable":
            return self.simple(416, "range not satisfiable\n", {"Content-Range": "bytes */%d" % size})
        start, end = rng if rng else (0, size - 1)
        if kind == "wrong_range":
            shift = int(fault.get("shift", 4096))
            start = max(0, min(size - 1, start + shift))
            end = max(start, min(size - 1, end + shift))
        length = end - start + 1 if size else 0
        declared = length
        if kind == "wrong_length":
            declared = max(0, length + int(fault.get("delta", -1)))
        self.send_response(206 if rng else 200)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(declared))
        if rng:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        self.end_headers()
        if self.command == "HEAD":
            return self.record(206 if rng else 200, 0, fault, rng_header)

        limit = length
        if kind in ("truncate", "reset", "stall"):
            limit = min(length, int(fault.get("after_bytes", length // 2)))
        elif kind == "wrong_length":
            limit = min(length, declared)
        rate = float(fault.get("rate", 0)) if kind == "slow" else 0
        sent = 0
        t0 = time.monotonic()
        try:  # the client may hang up (it should, on a bad answer): the request is logged anyway
            with open(path, "rb") as f:
                f.seek(start)
                while sent < limit:
                    chunk = f.read(min(CHUNK if not rate else max(1024, int(rate / 20)), limit - sent))
                    if not chunk:
                        break
                    if kind == "corrupt":
                        at = int(fault.get("at", 0)) - sent
                        if 0 <= at < len(chunk):
                            chunk = chunk[:at] + bytes([chunk[at] ^ 0x5A]) + chunk[at + 1:]
                    if rate:  # pace before sending, so the last byte is not followed by a wait
                        ahead = sent / rate - (time.monotonic() - t0)
                        if ahead > 0:
                            time.sleep(ahead)
                    self.wfile.write(chunk)
                    sent += len(chunk)
        finally:
            self.record(206 if rng else 200, sent, fault, rng_header)
        if kind == "stall":
            deadline = time.monotonic() + min(60.0, float(fault.get("seconds", 30)))
            while time.monotonic() < deadline and not self.server.stopping:
                time.sleep(0.05)
        if kind == "reset":
            return self.reset_connection()
        if kind in ("truncate", "stall", "wrong_length"):
            self.close_connection = True


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        # Clients hanging up (deltafin aborting a bad answer, a killed process) are expected here.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", action="append", required=True, metavar="OWNER/NAME=DIR")
    ap.add_argument("--commit", help="the commit every repo reports (default: derived from the name)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", help="write the bound port here once listening")
    ap.add_argument("--control", help="JSON fault rules, re-read when the file changes")
    ap.add_argument("--log", help="append one JSON line per request")
    ap.add_argument("--token", help="require 'Authorization: Bearer TOKEN' on resolve URLs")
    ap.add_argument("--max-seconds", type=float, default=300)
    ap.add_argument("--verbose", action="store_true", help="print fault rule changes and hits to stderr")
    args = ap.parse_args()

    repos = {}
    for spec in args.repo:
        name, _, root = spec.partition("=")
        commit = args.commit or hashlib.sha1(name.encode()).hexdigest()
        repos[name] = Repo(name, root, commit)

    srv = Server(("127.0.0.1", args.port), Handler)
    srv.repos = repos
    srv.faults = Faults(args.control, args.verbose)
    srv.log_path = args.log
    srv.log_lock = threading.Lock()
    srv.token = args.token
    srv.started = time.time()
    srv.stopping = False
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % srv.server_address[1])
        os.rename(tmp, args.port_file)

    def expire():
        time.sleep(args.max_seconds)
        srv.stopping = True
        print("hfserver: --max-seconds reached, exiting", file=sys.stderr)
        os._exit(0)

    threading.Thread(target=expire, daemon=True).start()
    try:
        srv.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
