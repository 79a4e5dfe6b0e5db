#!/usr/bin/env python3
"""codex_catalog.py — a Codex model catalog (config key model_catalog_json)
declaring a pagoda model the way Codex declares its own.

Codex only offers its apply_patch tool — the freeform (custom, Lark grammar)
kind — to models its catalog marks "apply_patch_tool_type": "freeform"; a
model name it does not know (pagoda's "local") gets fallback metadata and no
apply_patch. model_catalog_json replaces the built-in catalog, whose entries
carry version-specific required fields (base instructions, truncation
policy, ...), so rather than writing one by hand this reads the catalog
compiled into the installed codex binary (the JSON object holding
"models": [...]) and clones the entry of a model that uses freeform
apply_patch and plain function tools (no code-mode-only tool mode; gpt-5.5
in 0.171.0), renamed to SLUG and given CONTEXT tokens of context.

Usage: codex_catalog.py CODEX_BINARY SLUG CONTEXT OUT.json
Prints the slug of the model cloned. Exit 1 when no catalog is found.
"""
import json
import sys


def main():
    binary, slug, context, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    with open(binary, "rb") as f:
        data = f.read()
    dec = json.JSONDecoder()
    at = 0
    while True:
        i = data.find(b'"models": [', at)
        if i < 0:
            print("no model catalog in " + binary, file=sys.stderr)
            return 1
        at = i + 1
        j = data.rfind(b"{", 0, i)
        try:
            cat, _ = dec.raw_decode(data[j:j + 20_000_000].decode("utf-8", "replace"))
        except ValueError:
            continue
        models = cat.get("models") if isinstance(cat, dict) else None
        if models and all(isinstance(m, dict) and "slug" in m for m in models):
            break
    fits = [m for m in models if m.get("apply_patch_tool_type") == "freeform" and not m.get("tool_mode")
            and not m.get("use_responses_lite") and m.get("visibility") == "list"]
    if not fits:
        print("no model with freeform apply_patch and plain tools in the catalog", file=sys.stderr)
        return 1
    m = dict(fits[0])
    src = m["slug"]
    m.update(slug=slug, display_name=slug, description="pagoda test model",
             context_window=context, max_context_window=context, auto_compact_token_limit=None,
             upgrade=None, availability_nux=None, supported_in_api=True, prefer_websockets=False,
             priority=0)
    with open(out, "w") as f:
        json.dump({"models": [m]}, f, indent=1)
    print(src)
    return 0


if __name__ == "__main__":
    sys.exit(main())
