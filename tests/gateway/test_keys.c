/* Unit tests for gateway/keys: the file format (good files, and a table of bad
 * lines each with the line number and reason expected in the error), lookup,
 * hashing against published SHA-256 vectors and coreutils sha256sum, reload. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gateway/keys.h"
#include "gateway/partition.h"

/* SHA-256 test vectors (FIPS 180-2 examples and well-known strings). */
#define H_ABC "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define H_PASSWORD "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"
#define H_TEST "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
#define H_ABC448 "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"

static keys_t *parse_ok(const char *text)
{
    keys_t *k = NULL;
    char err[256] = "";
    int rc = keys_parse((const uint8_t *)text, strlen(text), "t.keys", &k, err, sizeof(err));
    if (rc != 0)
        fail_msg("unexpected parse error: %s", err);
    assert_non_null(k);
    return k;
}

static void test_hash_vectors(void **st)
{
    (void)st;
    char hex[65];
    assert_int_equal(keys_hash_hex("abc", hex), 0);
    assert_string_equal(hex, H_ABC);
    assert_int_equal(keys_hash_hex("password", hex), 0);
    assert_string_equal(hex, H_PASSWORD);
    assert_int_equal(keys_hash_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", hex), 0);
    assert_string_equal(hex, H_ABC448);
}

/* Independent reference: coreutils sha256sum on fresh random secrets. */
static void test_hash_vs_sha256sum(void **st)
{
    (void)st;
    if (system("command -v sha256sum >/dev/null 2>&1") != 0) {
        skip();
    }
    for (int i = 0; i < 3; i++) {
        char secret[KEYS_SECRET_LEN + 1];
        assert_int_equal(keys_secret_new(secret), 0);
        assert_int_equal(strlen(secret), KEYS_SECRET_LEN);
        assert_memory_equal(secret, "pgd-", 4);
        for (size_t j = 4; j < KEYS_SECRET_LEN; j++) {
            char c = secret[j];
            assert_true((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                        c == '-' || c == '_');
        }
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "printf '%%s' '%s' | sha256sum", secret);
        FILE *p = popen(cmd, "r");
        assert_non_null(p);
        char want[80] = "";
        assert_non_null(fgets(want, sizeof(want), p));
        pclose(p);
        want[64] = '\0';
        char hex[65];
        assert_int_equal(keys_hash_hex(secret, hex), 0);
        assert_string_equal(hex, want);
    }
    char a[KEYS_SECRET_LEN + 1], b[KEYS_SECRET_LEN + 1];
    keys_secret_new(a);
    keys_secret_new(b);
    assert_string_not_equal(a, b);
}

static void test_parse_and_lookup(void **st)
{
    (void)st;
    const char *text = "# pagoda keys\n"
                       "\n"
                       "alice   high   " H_ABC "\r\n"
                       "   \t# indented comment\n"
                       "batch-jobs\tlow\t" H_PASSWORD "\n"
                       "ops normal " "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08" " admin"; /* no final LF */
    keys_t *k = parse_ok(text);
    assert_int_equal(keys_count(k), 3);
    assert_string_equal(keys_entry(k, 0)->name, "alice");
    assert_int_equal(keys_entry(k, 0)->tier, PRIO_TIER_HIGH);
    assert_int_equal(keys_entry(k, 0)->admin, 0);
    assert_string_equal(keys_entry(k, 1)->name, "batch-jobs");
    assert_int_equal(keys_entry(k, 1)->tier, PRIO_TIER_LOW);
    assert_int_equal(keys_entry(k, 2)->tier, PRIO_TIER_NORMAL);
    assert_int_equal(keys_entry(k, 2)->admin, 1);
    assert_null(keys_entry(k, 3));

    const keys_entry_t *e = keys_lookup(k, "abc");
    assert_non_null(e);
    assert_string_equal(e->name, "alice");
    e = keys_lookup(k, "password");
    assert_non_null(e);
    assert_string_equal(e->name, "batch-jobs");
    e = keys_lookup(k, "test"); /* upper-case hex in the file */
    assert_non_null(e);
    assert_string_equal(e->name, "ops");
    assert_int_equal(e->admin, 1);

    assert_null(keys_lookup(k, "abcd"));
    assert_null(keys_lookup(k, "ab"));
    assert_null(keys_lookup(k, "Abc"));
    assert_null(keys_lookup(k, ""));
    assert_null(keys_lookup(k, NULL));
    assert_null(keys_lookup(NULL, "abc"));
    /* The hash itself is not a key. */
    assert_null(keys_lookup(k, H_ABC));
    /* Over-long tokens never match (and are not hashed). */
    char *big = malloc(KEYS_TOKEN_MAX + 2);
    memset(big, 'a', KEYS_TOKEN_MAX + 1);
    big[KEYS_TOKEN_MAX + 1] = '\0';
    assert_null(keys_lookup(k, big));
    free(big);
    keys_free(&k);
    assert_null(k);
    keys_free(&k);
}

static void test_empty_file(void **st)
{
    (void)st;
    keys_t *k = parse_ok("# nothing yet\n\n");
    assert_int_equal(keys_count(k), 0);
    assert_null(keys_lookup(k, "abc"));
    keys_free(&k);
    k = parse_ok("");
    assert_int_equal(keys_count(k), 0);
    keys_free(&k);
}

typedef struct {
    const char *text;
    const char *want; /* substring of the error message, with the line number */
} bad_case_t;

static void test_bad_files(void **st)
{
    (void)st;
    static const bad_case_t cases[] = {
        {"alice high\n", "t.keys:1: too few fields"},
        {"# c\nalice\n", "t.keys:2: too few fields"},
        {"alice high " H_ABC " admin extra\n", "t.keys:1: unknown flag 'extra'"},
        {"alice high " H_ABC " admin metrics group=g x\n", "t.keys:1: too many fields"},
        {"alice high " H_ABC " admin admin\n", "t.keys:1: flag 'admin' given twice"},
        {"alice high " H_ABC " metrics metrics\n", "t.keys:1: flag 'metrics' given twice"},
        {"alice high " H_ABC " group=a group=b\n", "t.keys:1: flag 'group=' given twice"},
        {"alice high " H_ABC " group=\n", "t.keys:1: group name must be 1..64 characters"},
        {"alice high " H_ABC " group=a/b\n", "t.keys:1: group name may only contain"},
        {"alice high " H_ABC " group=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
         "t.keys:1: group name must be 1..64 characters"},
        {"alice high " H_ABC " Group=a\n", "t.keys:1: unknown flag 'Group=a'"},
        {"alice high " H_ABC " group\n", "t.keys:1: unknown flag 'group'"},
        {"alice urgent " H_ABC "\n", "t.keys:1: unknown tier 'urgent'"},
        {"alice HIGH " H_ABC "\n", "t.keys:1: unknown tier 'HIGH'"},
        {"alice high abc\n", "t.keys:1: hash must be 64 hex digits"},
        {"alice high " H_ABC "0\n", "t.keys:1: hash must be 64 hex digits"},
        {"alice high ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015aZ\n",
         "t.keys:1: hash contains a non-hex character"},
        {"alice high " H_ABC " root\n", "t.keys:1: unknown flag 'root'"},
        {"al/ice high " H_ABC "\n", "t.keys:1: name may only contain"},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa high " H_ABC "\n",
         "t.keys:1: name longer than 64"},
        {"a high " H_ABC "\nb low " H_PASSWORD "\na low " H_TEST "\n", "t.keys:3: duplicate name 'a'"},
        {"a high " H_ABC "\n\n\nb low " H_ABC "\n", "t.keys:4: same key hash as 'a'"},
        {"a high " H_ABC "\nb\x01 low " H_TEST "\n", "t.keys:2: control character 0x01"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        keys_t *k = (keys_t *)0x1;
        char err[256] = "";
        int rc = keys_parse((const uint8_t *)cases[i].text, strlen(cases[i].text), "t.keys", &k, err,
                            sizeof(err));
        if (rc != -1 || k != NULL || !strstr(err, cases[i].want))
            fail_msg("case %zu: rc=%d err='%s' want '%s'", i, rc, err, cases[i].want);
    }
    /* NUL byte inside a line (length-delimited input). */
    const char nul[] = "a high " H_ABC "\nb lo\0w " H_TEST "\n";
    keys_t *k = NULL;
    char err[256] = "";
    assert_int_equal(keys_parse((const uint8_t *)nul, sizeof(nul) - 1, NULL, &k, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "keys:2: NUL byte"));
    /* Over-long line. */
    char *longline = malloc(KEYS_LINE_MAX + 10);
    memset(longline, ' ', KEYS_LINE_MAX + 9);
    longline[KEYS_LINE_MAX + 9] = '\n';
    assert_int_equal(keys_parse((const uint8_t *)longline, KEYS_LINE_MAX + 10, "x", &k, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "x:1: line longer than"));
    free(longline);
    /* A NULL err buffer is allowed. */
    assert_int_equal(keys_parse((const uint8_t *)"x", 1, NULL, &k, NULL, 0), -1);
}

/* Flags in any order; a group is recorded as written; admin implies metrics;
 * each row's partition is partition_of_key(digest, group): keys of one group
 * share it, other keys (grouped or not) do not, and none is 0. */
static void test_flags_and_groups(void **st)
{
    (void)st;
    static const struct {
        const char *line;
        int admin, metrics;
        const char *group;
    } rows[] = {
        {"a high " H_ABC, 0, 0, ""},
        {"b low " H_PASSWORD " group=team", 0, 0, "team"},
        {"c normal " H_TEST " group=team admin", 1, 1, "team"},
        {"d normal " H_ABC448 " metrics", 0, 1, ""},
        {"e normal 1111111111111111111111111111111111111111111111111111111111111111 admin group=other", 1, 1,
         "other"},
        {"f low 2222222222222222222222222222222222222222222222222222222222222222 metrics\tgroup=Te.am-1@x_ admin",
         1, 1, "Te.am-1@x_"},
        {"g low 3333333333333333333333333333333333333333333333333333333333333333 group=team", 0, 0, "team"},
    };
    const size_t n = sizeof rows / sizeof rows[0];
    char text[2048] = "";
    for (size_t i = 0; i < n; i++) {
        strcat(text, rows[i].line);
        strcat(text, "\n");
    }
    keys_t *k = parse_ok(text);
    assert_int_equal(keys_count(k), n);
    for (size_t i = 0; i < n; i++) {
        const keys_entry_t *e = keys_entry(k, i);
        if (e->admin != rows[i].admin || e->metrics != rows[i].metrics || strcmp(e->group, rows[i].group) != 0)
            fail_msg("row %zu: admin %d metrics %d group '%s'", i, e->admin, e->metrics, e->group);
        assert_true(e->partition != 0);
        assert_true(e->partition == partition_of_key(e->sha256, e->group[0] ? e->group : NULL));
        for (size_t j = 0; j < i; j++) {
            const keys_entry_t *o = keys_entry(k, j);
            bool same_group = e->group[0] && strcmp(e->group, o->group) == 0;
            if ((e->partition == o->partition) != same_group)
                fail_msg("rows %zu and %zu: partitions %s but groups '%s' '%s'", j, i,
                         e->partition == o->partition ? "equal" : "differ", o->group, e->group);
        }
    }
    /* a reload (or another gateway) derives the same partitions; renaming
     * or re-tiering a key keeps its partition */
    keys_t *k2 = parse_ok("renamed low " H_ABC "\nb2 high " H_PASSWORD " group=team\n");
    assert_true(keys_entry(k2, 0)->partition == keys_entry(k, 0)->partition);
    assert_true(keys_entry(k2, 1)->partition == keys_entry(k, 1)->partition);
    keys_free(&k2);
    /* moving a key out of its group gives it its own partition */
    k2 = parse_ok("b low " H_PASSWORD "\n");
    assert_true(keys_entry(k2, 0)->partition != keys_entry(k, 1)->partition);
    keys_free(&k2);
    keys_free(&k);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_load_and_reload(void **st)
{
    (void)st;
    char path[] = "/tmp/pagoda-keys-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_file(path, "alice high " H_ABC "\n");
    keys_t *k1 = NULL;
    char err[256] = "";
    assert_int_equal(keys_load(path, &k1, err, sizeof(err)), 0);
    assert_non_null(keys_lookup(k1, "abc"));
    assert_null(keys_lookup(k1, "password"));

    /* Reload: a new table; the old one stays valid until freed. */
    write_file(path, "alice low " H_ABC "\nbob normal " H_PASSWORD "\n");
    keys_t *k2 = NULL;
    assert_int_equal(keys_load(path, &k2, err, sizeof(err)), 0);
    assert_int_equal(keys_lookup(k1, "abc")->tier, PRIO_TIER_HIGH);
    assert_int_equal(keys_lookup(k2, "abc")->tier, PRIO_TIER_LOW);
    assert_string_equal(keys_lookup(k2, "password")->name, "bob");
    keys_free(&k1);

    /* A bad reload leaves the caller's current table alone and names the file. */
    write_file(path, "alice low " H_ABC "\nbob normal nothex\n");
    keys_t *k3 = NULL;
    assert_int_equal(keys_load(path, &k3, err, sizeof(err)), -1);
    assert_null(k3);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, ":2: hash must be"));
    assert_non_null(keys_lookup(k2, "password"));
    keys_free(&k2);
    unlink(path);

    assert_int_equal(keys_load("/nonexistent/pagoda.keys", &k3, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "/nonexistent/pagoda.keys: No such file"));
}

static void test_many_entries(void **st)
{
    (void)st;
    /* 500 entries with hashes from keys_hash_hex; every secret finds its own. */
    size_t cap = 500 * 120;
    char *text = malloc(cap);
    size_t n = 0;
    for (int i = 0; i < 500; i++) {
        char secret[32], hex[65];
        snprintf(secret, sizeof(secret), "secret-%d", i);
        keys_hash_hex(secret, hex);
        n += (size_t)snprintf(text + n, cap - n, "user%d %s %s%s\n", i, i % 3 == 0 ? "high" : "low", hex,
                              i % 7 == 0 ? " admin" : "");
    }
    keys_t *k = NULL;
    char err[256];
    assert_int_equal(keys_parse((const uint8_t *)text, n, "many", &k, err, sizeof(err)), 0);
    assert_int_equal(keys_count(k), 500);
    for (int i = 0; i < 500; i++) {
        char secret[32], name[32];
        snprintf(secret, sizeof(secret), "secret-%d", i);
        snprintf(name, sizeof(name), "user%d", i);
        const keys_entry_t *e = keys_lookup(k, secret);
        assert_non_null(e);
        assert_string_equal(e->name, name);
        assert_int_equal(e->admin, i % 7 == 0);
    }
    assert_null(keys_lookup(k, "secret-500"));
    keys_free(&k);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_vectors),
        cmocka_unit_test(test_hash_vs_sha256sum),
        cmocka_unit_test(test_parse_and_lookup),
        cmocka_unit_test(test_empty_file),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_flags_and_groups),
        cmocka_unit_test(test_load_and_reload),
        cmocka_unit_test(test_many_entries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
