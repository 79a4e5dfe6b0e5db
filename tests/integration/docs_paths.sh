#!/usr/bin/env bash
# docs_paths.sh — every source path docs/*.md and README.md name exists (a
# static check run with the integration tests, well under a second), so the
# docs follow the code when files move. A path is a word starting with one of
# the source folders (common/ worker/ gateway/ proto/ tests/ deploy/ docs/);
# {a,b} is expanded and * globbed; a word going on with <placeholder> is a
# pattern, not a path. Names that are not paths, or files a
# worked example invents, are listed in NOT_PATHS with the reason.
source "$(dirname "$0")/../lib.sh"
cd "$ROOT"
command -v python3 >/dev/null || { skip "python3 not found"; exit 0; }

python3 - <<'PY'
import glob, os, re, sys
NOT_PATHS = {
    "deploy/pagoda-gateway": "a Kubernetes deployment name (kubectl exec deploy/...)",
    "gateway/anthropic.c": "the new-endpoint worked example's file",
    "common/text/tool_format_funcall.c": "the new-tool-syntax worked example's file",
}
word = re.compile(r"(?<![A-Za-z0-9_./-])((?:common|worker|gateway|proto|tests|deploy|docs)/"
                  r"[A-Za-z0-9_./{},*@-]*[A-Za-z0-9_/}*])")
def expand(p):
    m = re.search(r"\{([^{}]*)\}", p)
    if not m:
        return [p]
    return [q for alt in m.group(1).split(",") for q in expand(p[:m.start()] + alt + p[m.end():])]
bad, n = [], 0
for f in sorted(glob.glob("docs/*.md")) + ["README.md"]:
    for ln, line in enumerate(open(f, encoding="utf-8"), 1):
        for m in word.finditer(line):
            if line[m.end():m.end() + 1] == "<":  # a pattern such as tool_format_<family>.c
                continue
            for q in expand(m.group(1)):
                q = q.rstrip(".")
                if q in NOT_PATHS:
                    continue
                n += 1
                if not (glob.glob(q) if "*" in q else os.path.exists(q)):
                    bad.append("%s:%d: %s" % (f, ln, q))
for b in bad:
    print("not ok - %s does not exist" % b)
if not bad:
    print("ok - the %d source paths named in docs/ and README.md exist" % n)
sys.exit(1 if bad else 0)
PY
