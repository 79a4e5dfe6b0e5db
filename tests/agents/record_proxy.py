#!/usr/bin/env python3
"""record_proxy.py — a recording HTTP proxy between a coding agent and pagoda.

Used by tests/agents/*.sh: the real `claude` and `codex` binaries talk to this
proxy, which forwards every request to the gateway unchanged (streamed
answers are passed through chunk by chunk) and writes each request body into
a directory, so the test can assert on what the agent sent and the corpus
under tests/agents/corpus/ can be refreshed from a real run.

A random-weight model never decides to call a tool by itself, so the proxy
can *force* one, the way a user's `tool_choice` would: --force NAME makes the
first request of a conversation (one whose last input is a user turn, not a
tool result) carry a tool_choice naming NAME, in the shape of the route
(/v1/messages: {"type":"tool","name"}; /v1/responses: {"type":"function" or
"custom","name"}). Everything else — tool definitions, grammar, the model's
output, the agent's handling of the call — is the real programs'.
--grammar NAME=FILE replaces the Lark definition of custom tool NAME (Codex's
apply_patch) with the file's text, to pin the patched file's name.
--schema NAME=FILE replaces the JSON Schema of function tool NAME (Anthropic
input_schema, Responses parameters) with the file's JSON, to pin what a
random model's forced call says (a `const` command line for a shell tool, a
known file for Read) so the agent runs only what the test chose.
/v1/messages/count_tokens bodies are recorded too (NNN-count_tokens.json).

Usage: record_proxy.py --listen PORT --upstream http://127.0.0.1:GW --dir OUT
       [--force NAME] [--grammar NAME=FILE] [--schema NAME=FILE]
Prints "listening PORT" once ready. Stops on SIGTERM.
"""
import argparse
import http.client
import json
import os
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
       "proxy-authorization", "proxy-authenticate", "content-length", "host",
       "accept-encoding"}

lock = threading.Lock()
counter = [0]


def last_is_user_turn(route, body):
    if route == "messages":
        # Claude Code appends its environment as a role "system" message
        # after the user's turn: the turn that decides is the last other one.
        msgs = [m for m in body.get("messages") or [] if m.get("role") != "system"]
        if not msgs or msgs[-1].get("role") != "user":
            return False
        c = msgs[-1].get("content")
        if isinstance(c, list):
            return not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in c)
        return True
    if route == "responses":
        inp = body.get("input")
        if isinstance(inp, str):
            return True
        if not isinstance(inp, list) or not inp:
            return False
        last = inp[-1]
        return last.get("type") in (None, "message") and last.get("role") == "user"
    return False


def tool_kind(body, name):
    """'custom' or 'function' for a Responses tool named name (namespaces searched)."""
    def walk(tools):
        for t in tools or []:
            if t.get("type") == "namespace":
                k = walk(t.get("tools"))
                if k:
                    return k
            elif t.get("name") == name:
                return t.get("type")
        return None
    return walk(body.get("tools")) or "function"


def rewrite(route, body, args):
    if args.force and last_is_user_turn(route, body):
        if route == "messages":
            body["tool_choice"] = {"type": "tool", "name": args.force}
        else:
            body["tool_choice"] = {"type": tool_kind(body, args.force), "name": args.force}
    for name, schema in args.schemas.items():
        def walk(tools):
            for t in tools or []:
                if t.get("type") == "namespace":
                    walk(t.get("tools"))
                elif t.get("name") == name and t.get("type") in (None, "function", "custom") \
                        and "format" not in t:
                    t["input_schema" if route != "responses" else "parameters"] = schema
        walk(body.get("tools"))
    for name, text in args.grammars.items():
        def walk(tools):
            for t in tools or []:
                if t.get("type") == "namespace":
                    walk(t.get("tools"))
                elif t.get("type") == "custom" and t.get("name") == name:
                    t.setdefault("format", {})["definition"] = text
        walk(body.get("tools"))
    return body


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):
        pass

    def do_GET(self):
        self.forward(None)

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.forward(self.rfile.read(n))

    def do_HEAD(self):
        self.forward(None)

    def forward(self, raw):
        args = self.server.args
        path = urllib.parse.urlsplit(self.path).path
        route = "messages" if path.endswith("/messages") else \
                "responses" if path.endswith("/responses") else \
                "count_tokens" if path.endswith("/messages/count_tokens") else "other"
        sent = raw
        if raw and route != "other":
            try:
                body = json.loads(raw)
                with lock:
                    counter[0] += 1
                    k = counter[0]
                with open(os.path.join(args.dir, "%03d-%s.json" % (k, route)), "w") as f:
                    json.dump({"path": self.path,
                               "headers": {h.lower(): v for h, v in self.headers.items()
                                           if h.lower().startswith(("anthropic-", "openai-", "x-", "user-agent"))},
                               "body": body}, f)
                sent = json.dumps(rewrite(route, body, args)).encode()
            except ValueError:
                pass
        up = urllib.parse.urlsplit(args.upstream)
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=600)
        hdrs = {h: v for h, v in self.headers.items() if h.lower() not in HOP}
        if sent is not None:
            hdrs["Content-Length"] = str(len(sent))
        try:
            conn.request(self.command, self.path, body=sent, headers=hdrs)
            r = conn.getresponse()
        except OSError as e:
            self.send_error(502, str(e))
            return
        self.send_response(r.status)
        for h, v in r.getheaders():
            if h.lower() not in HOP:
                self.send_header(h, v)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with open(os.path.join(args.dir, "statuses.log"), "a") as f:
            f.write("%s %s %d\n" % (self.command, self.path, r.status))
        while True:
            chunk = r.read1(65536) if hasattr(r, "read1") else r.read(65536)
            if not chunk:
                break
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        conn.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--listen", type=int, required=True)
    p.add_argument("--upstream", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--force")
    p.add_argument("--grammar", action="append", default=[])
    p.add_argument("--schema", action="append", default=[])
    args = p.parse_args()
    args.schemas = {}
    for g in args.schema:
        name, path = g.split("=", 1)
        with open(path) as f:
            args.schemas[name] = json.load(f)
    args.grammars = {}
    for g in args.grammar:
        name, path = g.split("=", 1)
        with open(path) as f:
            args.grammars[name] = f.read()
    os.makedirs(args.dir, exist_ok=True)
    srv = ThreadingHTTPServer(("127.0.0.1", args.listen), Handler)
    srv.daemon_threads = True
    srv.args = args
    print("listening", srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
