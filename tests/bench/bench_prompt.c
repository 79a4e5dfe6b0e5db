/* bench_prompt.c — synthetic prompts (see bench_prompt.h). */
#include "tests/bench/bench_prompt.h"

#include <string.h>

#include "common/xalloc.h"

/* Checked to encode as exactly one token per word (with leading space) with
 * the llama-2 and llama-3 tokenizers: 256 words -> 256 tokens. */
static const char *const words[] = {
    "time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child",
    "world", "school", "state", "family", "student", "group", "country", "problem",
    "hand", "part", "place", "case", "week", "company", "system", "program", "question",
    "work", "government", "number", "night", "point", "home", "water", "room", "mother",
    "area", "money", "story", "fact", "month", "lot", "right", "study", "book", "eye",
    "job", "word", "business", "issue", "side", "kind", "head", "house", "service",
    "friend", "father", "power", "hour", "game", "line", "end", "member", "law", "car",
    "city", "community", "name", "president", "team", "minute", "idea", "kid", "body",
    "information", "back", "parent", "face", "others", "level", "office", "door",
    "health", "person", "art", "war", "history", "party", "result", "change", "morning",
    "reason", "research", "girl", "guy", "moment", "air", "teacher", "force",
    "education", "food", "road", "river", "tree", "light", "stone", "green", "blue",
    "small", "large", "open", "little", "old", "new", "good", "great", "high", "long",
    "young", "early",
};
enum { N_WORDS = sizeof words / sizeof words[0] };

uint64_t bench_prompt_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Appends n words drawn from state st to out[*len] (space-separated). */
static void put_words(char *out, size_t *len, size_t n, uint64_t st)
{
    bench_prompt_rand(&st);
    for (size_t i = 0; i < n; i++) {
        const char *w = words[bench_prompt_rand(&st) % N_WORDS];
        size_t wl = strlen(w);
        if (*len > 0)
            out[(*len)++] = ' ';
        memcpy(out + *len, w, wl);
        *len += wl;
    }
    out[*len] = '\0';
}

char *bench_prompt_conversation(size_t prefix_words, uint64_t seed, uint64_t i_request,
                                size_t groups, size_t turns, size_t turn_words)
{
    if (groups < 1)
        groups = 1;
    if (turns < 1)
        turns = 1;
    uint64_t slot = i_request % groups, cycle = i_request / groups;
    uint64_t turn = cycle % turns, conv = slot + groups * (cycle / turns);
    size_t n = prefix_words + (turn + 1) * BENCH_PROMPT_TAIL + turn * turn_words;
    char *out = xmalloc(n * 12 + 1);
    size_t len = 0;
    out[0] = '\0';
    put_words(out, &len, prefix_words, seed ^ ((slot + 1) * 0x9e3779b97f4a7c15ull));
    for (uint64_t k = 0; k <= turn; k++) {
        uint64_t id = (conv * 1024 + k) * 0xd1b54a32d192ed03ull;
        put_words(out, &len, BENCH_PROMPT_TAIL, seed ^ id ^ 0x75u);
        if (k < turn)
            put_words(out, &len, turn_words, seed ^ id ^ 0x61u);
    }
    return out;
}

char *bench_prompt_make(size_t n_words, uint64_t seed, uint64_t i_request, bool shared_prefix)
{
    size_t n_shared = 0;
    if (shared_prefix)
        n_shared = n_words > BENCH_PROMPT_TAIL ? n_words - BENCH_PROMPT_TAIL : 0;
    /* Longest word is 11 bytes, plus a space. */
    char *out = xmalloc(n_words * 12 + 1);
    size_t len = 0;
    uint64_t st_shared = seed ^ 0x5ca1ab1e0ddba11ull;
    uint64_t st_req = seed ^ ((i_request + 1) * 0xd1b54a32d192ed03ull);
    bench_prompt_rand(&st_req); /* decorrelate neighbouring request indices */
    for (size_t i = 0; i < n_words; i++) {
        uint64_t r = bench_prompt_rand(i < n_shared ? &st_shared : &st_req);
        const char *w = words[r % N_WORDS];
        size_t wl = strlen(w);
        if (i > 0)
            out[len++] = ' ';
        memcpy(out + len, w, wl);
        len += wl;
    }
    out[len] = '\0';
    return out;
}
