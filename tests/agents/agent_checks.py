#!/usr/bin/env python3
"""agent_checks.py — assertions on the request bodies record_proxy.py wrote.

  agent_checks.py roundtrip DIR ROUTE NAME [MARKER]
      A later request of the conversation carries the result of a call of tool
      NAME: /v1/messages — an assistant tool_use {name NAME, id X} followed by a
      user tool_result {tool_use_id X}; /v1/responses — a function_call or
      custom_tool_call {name NAME, call_id X} followed by a
      function_call_output / custom_tool_call_output {call_id X}. With MARKER,
      the result's text contains it. Exit 0 when found, else 1 with the reason.
  agent_checks.py get DIR ROUTE INDEX PYEXPR
      Prints eval(PYEXPR) with `b` = body and `h` = headers of the INDEX-th
      (0-based; -1 last) recorded request of ROUTE.
"""
import glob
import json
import os
import sys


def load(d, route):
    out = []
    for p in sorted(glob.glob(os.path.join(d, "*-%s.json" % route))):
        with open(p) as f:
            out.append(json.load(f))
    return out


def text_of(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(text_of(c.get("text", c.get("content", ""))) if isinstance(c, dict) else str(c)
                         for c in content)
    return json.dumps(content)


def roundtrip(d, route, name, marker):
    reqs = load(d, route)
    if not reqs:
        return "no %s request recorded in %s" % (route, d)
    seen_call = False
    for r in reqs:
        b = r["body"]
        if route == "messages":
            calls = {}
            for m in b.get("messages", []):
                if not isinstance(m.get("content"), list):
                    continue
                for blk in m["content"]:
                    if m["role"] == "assistant" and blk.get("type") == "tool_use" and blk.get("name") == name:
                        calls[blk["id"]] = blk
                    if m["role"] == "user" and blk.get("type") == "tool_result" and blk.get("tool_use_id") in calls:
                        got = text_of(blk.get("content", ""))
                        if marker and marker not in got:
                            return "tool_result for %s %s lacks %r: %r" % (name, blk["tool_use_id"], marker, got[:300])
                        return None
            seen_call = seen_call or bool(calls)
        else:
            calls = {}
            inp = b.get("input")
            for it in inp if isinstance(inp, list) else []:
                t = it.get("type")
                if t in ("function_call", "custom_tool_call") and it.get("name") == name:
                    calls[it.get("call_id")] = it
                if t in ("function_call_output", "custom_tool_call_output") and it.get("call_id") in calls:
                    got = text_of(it.get("output", ""))
                    if marker and marker not in got:
                        return "%s for %s %s lacks %r: %r" % (t, name, it["call_id"], marker, got[:300])
                    return None
            seen_call = seen_call or bool(calls)
    if seen_call:
        return "a call of %s came back in a later request, but no result for it" % name
    return "no later request carries a call of %s (%d %s requests)" % (name, len(reqs), route)


def main():
    cmd = sys.argv[1]
    if cmd == "roundtrip":
        d, route, name = sys.argv[2:5]
        marker = sys.argv[5] if len(sys.argv) > 5 else None
        why = roundtrip(d, route, name, marker)
        if why:
            print("# " + why)
            return 1
        return 0
    if cmd == "get":
        d, route, idx, expr = sys.argv[2:6]
        reqs = load(d, route)
        r = reqs[int(idx)]
        print(eval(expr, {"json": json}, {"b": r["body"], "h": r["headers"], "p": r["path"]}))
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
