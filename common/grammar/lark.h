/* lark.h — OpenAI custom-tool grammars compiled to GBNF (gbnf.h).
 *
 * A custom tool ({"type":"custom","name":..,"format":{"type":"grammar",
 * "syntax":"lark"|"regex","definition":".."}}) constrains the tool's free-text
 * input. lark_to_gbnf compiles "lark" definitions, lark_regex_to_gbnf
 * "regex" ones; both write GBNF text whose rule `<prefix>root` matches the
 * language, in one of two modes:
 *
 *   LARK_RAW          the text itself.
 *   LARK_JSON_STRING  the body of a JSON string literal (no quotes) whose
 *                     decoded value is in the language — what a model writes
 *                     for {"input": "<here>"} in a tool-call object. Each
 *                     character has ONE spelling, JSON.stringify's: '"' → \",
 *                     '\' → \\, U+0008 U+000C U+000A U+000D U+0009 → \b \f \n
 *                     \r \t, other controls below U+0020 → \u00xx (lowercase
 *                     hex), everything else (DEL, '/', U+2028, non-ASCII) as
 *                     itself in UTF-8 — the spelling json_schema.c already
 *                     writes for `pattern`, and the one JSON serializers and
 *                     so models use most. A class holding such characters is
 *                     (the rest of the class) | each escaped spelling. So a
 *                     raw newline is rejected; "\n" (two characters) is a
 *                     newline; "\u000a" and "\/" are not accepted.
 *
 * The Lark subset (OpenAI's documented one; https://lark-parser.readthedocs.io
 * for the syntax). Anything not listed is refused with "line L, column C:
 * <construct> ...", columns counting characters:
 *
 *   definitions  `name: expansions` (rule, lowercase, `_?[a-z][_a-z0-9]*`;
 *                modifiers `!` `?` accepted and ignored) and `NAME: expansions`
 *                (terminal, uppercase). One per line; a line whose first
 *                non-blank character is `|` continues the alternatives;
 *                `\` before a newline joins lines; comments `//` and `#`.
 *                The start rule is `start`. Each name is defined once.
 *   expansions   a b (sequence), a | b, ( ... ), [ ... ] and x? (optional),
 *                x* x+, x ~ n and x ~ n..m (n ≤ m ≤ GBNF_MAX_REPEAT),
 *                `-> alias` at the end of an alternative (ignored)
 *   "..."        string literal; escapes as Lark evaluates them: \\ \" \n \t
 *                \r \f \xHH \uHHHH \UHHHHHHHH, any other \c stays the two
 *                characters \c. "..."i case-insensitive for ASCII letters
 *                (a non-ASCII character in it is refused). "a".."z" a range of
 *                single characters.
 *   /.../flags   regex terminal, compiled by regex_to_gbnf (regex.h)
 *                with Python semantics: `.` excludes only \n;
 *                classes, \d \w \s (ASCII) and their negations, groups (?:),
 *                | * + ? {m,n}, lazy quantifiers (same language). Flags: s
 *                (dot matches \n); m and u (no effect without anchors)
 *                accepted; i x l refused. Refused inside: ^ $ and other
 *                anchors, lookaround, backreferences, named groups, inline
 *                flags, '[' inside a class, \p classes. A raw newline inside
 *                /.../ is refused.
 *   %import common.NAME [-> ALIAS], %import common (A, B, ...)
 *                for LF CR NEWLINE WS WS_INLINE DIGIT DIGITS INT SIGNED_INT
 *                DECIMAL FLOAT SIGNED_FLOAT NUMBER SIGNED_NUMBER LETTER WORD
 *                CNAME ESCAPED_STRING HEXDIGIT LCASE_LETTER UCASE_LETTER
 *                SH_COMMENT CPP_COMMENT C_COMMENT SQL_COMMENT (written here
 *                as common.lark defines them; DIGITS is an extension, = INT;
 *                ESCAPED_STRING is "..." with backslash escapes, no newline).
 *   %ignore      SUPPORTED: `%ignore X` (terminals, literals or regexes, any
 *                number of lines) lets any number of X (zero or more) stand
 *                before every terminal used in a rule and at the end of the
 *                text, where Lark's lexer would skip them. (A grammar without %ignore allows
 *                no whitespace it does not spell out.)
 *   refused      priorities (`name.2:`), templates (`name{x}`), %declare,
 *                %override, %extend, other imports, a terminal that uses a
 *                rule, recursive terminals, undefined or twice-defined names.
 *
 * Semantics. Terminals are matched as part of one character-level grammar,
 * not by a longest-match lexer first: where Lark's lexer would cut a token
 * differently the GBNF may accept more (never less) — e.g. `NAME "x"` with
 * NAME /\w+/ accepts "abx". \d \w \s are ASCII (Python's are Unicode).
 * Earley parsing accepts grammars GBNF cannot run: a rule that reaches itself
 * without consuming a character (left recursion) and a repetition of
 * something that can be empty (`("a"?)*`) are refused, naming the rule.
 *
 * Matching: gbnf.h keeps at most GBNF_MAX_STACKS (64) parses alive at once
 * and drops the rest, so more than 64 alternatives alive after the same
 * text (e.g. 70 keywords "w0".."w69": after "w") lose matches — a limit of
 * the matcher, not checked here.
 *
 * Every result is checked with gbnf_parse before it is returned, so
 * gbnf_parse accepts all text these functions return; a GBNF refusal is
 * reported in Lark terms (the Lark rule's line and column).
 *
 * Generated names (all after `prefix`): root, r-<rule>, t-<TERMINAL>,
 * c-<common terminal>, x-<n> (one per regex), ign and igns (%ignore).
 *
 * Limits (refused beyond): LARK_MAX_TEXT bytes of definition, LARK_MAX_DEFS
 * names, LARK_MAX_NESTING levels of ( ) [ ], LARK_MAX_NAME bytes per name,
 * GBNF_MAX_TEXT bytes of output; the text must be valid UTF-8. Parsing
 * recursion is bounded by LARK_MAX_NESTING.
 *
 * Ownership: the returned text is malloc'd; the caller frees it. NULL on
 * error, with the reason in err (may be NULL).
 */
#ifndef PAGODA_COMMON_GRAMMAR_LARK_H
#define PAGODA_COMMON_GRAMMAR_LARK_H

#include <stddef.h>
#include <stdint.h>

enum lark_mode {
    LARK_RAW = 0,         /* the grammar matches the text itself */
    LARK_JSON_STRING = 1, /* ... the body of a JSON string whose value is the text */
};

#define LARK_MAX_TEXT (64u << 10) /* bytes of a Lark or regex definition */
#define LARK_MAX_DEFS 4096        /* rule, terminal and imported names */
#define LARK_MAX_NESTING 32       /* ( ) and [ ] depth */
#define LARK_MAX_NAME 128         /* bytes of one name */

/* GBNF for a Lark grammar (syntax "lark"); mode is an enum lark_mode. */
char *lark_to_gbnf(const uint8_t *text, size_t len, int mode, char *err, size_t errlen);

/* GBNF for a regex (syntax "regex": Rust regex syntax, matched against the
 * whole text). The subset is regex.h's with Python/Rust rules (`.` excludes only \n); ^ at the start and $ at the end of a
 * top-level alternative are accepted (they change nothing for a whole-text
 * match). Errors name the byte offset in the regex. */
char *lark_regex_to_gbnf(const uint8_t *re, size_t len, int mode, char *err, size_t errlen);

/* The same, every rule name starting with prefix ([A-Za-z0-9_-]*, NULL =
 * ""), the root being `<prefix>root`: to join several into one grammar with
 * json_schema_gbnf_wrap (prefix must then not be ""). */
char *lark_to_gbnf_prefixed(const uint8_t *text, size_t len, int mode, const char *prefix, char *err,
                            size_t errlen);
char *lark_regex_to_gbnf_prefixed(const uint8_t *re, size_t len, int mode, const char *prefix, char *err,
                                  size_t errlen);

#endif
