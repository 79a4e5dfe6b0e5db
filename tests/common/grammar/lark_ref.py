#!/usr/bin/env python3
"""lark_ref.py — the independent reference for test_lark.c's regex table.

Prints the C rows of REGEX_REF: for each regex, each string marked "+" when
Python's re.fullmatch accepts it and "-" when not. Python's re stands in for
Rust's regex crate (OpenAI's "regex" syntax): the regexes below use only
syntax both read the same way (ASCII text, so \\d \\w \\s agree too).

    python3 tests/common/grammar/lark_ref.py > /tmp/rows.c
    # paste the rows into REGEX_REF in test_lark.c
"""
import re

CASES = [
    (r"[a-z]+", ["abc", "", "abC", "a1", "z"]),
    (r"\d{3}-\d{4}", ["555-1234", "5551234", "55-1234", "555-12345"]),
    (r"(foo|bar)baz?", ["fooba", "barbaz", "foo", "bazfoo", "foobaz"]),
    (r"a.c", ["abc", "a\nc", "a\rc", "a\"c", "ac", "a\u00e9c"]),
    (r'[^"\\]*', ["a\nb", "a\"b", "a\\b", "", "tab\there"]),
    (r"^\w+@\w+\.com$", ["joe@ex.com", "joe@excom", "joe@ex.com\n", "@ex.com"]),
    (r"(?:ab){2,3}", ["abab", "ababab", "ab", "abababab"]),
    (r"\s*x\s*", [" x\t", "\nx\r\n", "xx", "x"]),
    (r"[\x41-\x43]+", ["ABC", "D", "CAB"]),
    (r"colou?r", ["color", "colour", "colouur"]),
    (r"[^\n]*\n", ["abc\n", "abc", "a\nb\n", "\n"]),
    (r"\u00e9+", ["\u00e9\u00e9", "e", ""]),
    (r"\\[nt]", ["\\n", "\n", "\\t", "\\r"]),
    (r"a|", ["", "a", "b"]),
    (r"[.]", [".", "a"]),
    (r"x*?y", ["xxy", "y", "yx"]),
    (r"[\t\x01-\x08]+", ["\t\x01\x08", "\n", "\x1f"]),
    (r"[-+]?[0-9]+(\.[0-9]+)?", ["-1.5", "+2", "3.", ".5", "42"]),
    (r"\D\W\S", ["a!b", "1!b", "a b"]),
    (r"(\"|')[a-z]*(\"|')", ["\"abc\"", "'x'", "\"a'", "abc"]),
]


def c_str(s):
    """A C string literal for s (UTF-8; controls as 3-digit octal)."""
    out = []
    for ch in s:
        if ch in "\\\"":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("\\%03o" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


if __name__ == "__main__":
    for rx, strings in CASES:
        marks = ", ".join(c_str(("+" if re.fullmatch(rx, s) else "-") + s) for s in strings)
        print("    {%s, {%s}}," % (c_str(rx), marks))
