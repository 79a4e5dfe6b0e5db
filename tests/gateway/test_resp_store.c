/* Unit tests for gateway/resp_store: round trip, owner isolation, max-age
 * expiry (driven by the now_s argument, no sleeping), the size cap, reopen
 * after close and after a writer was killed with SIGKILL, two processes
 * writing to one file at once (rows all there, integrity_check ok), and
 * processes opening one new file at the same moment; chains stored as
 * deltas (walk, hidden parents, a parent gone before its child), per-key
 * quotas as a tenant would abuse them (key A never evicts key B), the
 * global cap full of others' responses (refused), another connection
 * holding the write lock (BUSY within the wait, reads unaffected), and a
 * schema-1 file migrated. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gateway/resp_store.h"

static char dir[64];

static int setup(void **st)
{
    snprintf(dir, sizeof dir, "/tmp/pagoda-rs.XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **st)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static void path_of(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", dir, name);
}

static resp_store_t *open_ok(const char *path, int64_t max_age, int64_t max_bytes)
{
    resp_store_t *s = NULL;
    char err[256] = "";
    resp_store_config_t cfg = {.max_age_s = max_age, .max_bytes = max_bytes};
    if (resp_store_open(path, &cfg, &s, err, sizeof err) != 0)
        fail_msg("open %s: %s", path, err);
    return s;
}

/* A put without a parent. */
static int put(resp_store_t *s, const char *id, const char *owner, int64_t now, const char *resp, const char *input,
               char *err, size_t errlen)
{
    resp_store_put_t p = {.id = id, .owner = owner, .now_s = now, .response = resp, .input = input};
    return resp_store_put(s, &p, err, errlen);
}

static void put_ok(resp_store_t *s, const char *id, const char *owner, int64_t now, const char *resp)
{
    char err[256] = "";
    if (put(s, id, owner, now, resp, "[{\"type\":\"message\"}]", err, sizeof err) != 0)
        fail_msg("put %s: %s", id, err);
}

static void test_roundtrip_and_owners(void **st)
{
    resp_store_t *s = open_ok(":memory:", 0, 0);
    put_ok(s, "resp_1", "alice", 1000, "{\"id\":\"resp_1\"}");
    resp_store_row_t row;
    assert_int_equal(resp_store_get(s, "resp_1", "alice", 1000, &row), 0);
    assert_string_equal(row.response, "{\"id\":\"resp_1\"}");
    assert_string_equal(row.input, "[{\"type\":\"message\"}]");
    assert_int_equal(row.created_s, 1000);
    resp_store_row_free(&row);
    /* another owner sees nothing and deletes nothing */
    assert_int_equal(resp_store_get(s, "resp_1", "bob", 1000, &row), 1);
    assert_null(row.response);
    assert_int_equal(resp_store_delete(s, "resp_1", "bob"), 1);
    assert_int_equal(resp_store_get(s, "resp_1", "alice", 1000, &row), 0);
    resp_store_row_free(&row);
    assert_int_equal(resp_store_get(s, "resp_nope", "alice", 1000, &row), 1);
    /* the owner deletes it, once */
    assert_int_equal(resp_store_delete(s, "resp_1", "alice"), 0);
    assert_int_equal(resp_store_delete(s, "resp_1", "alice"), 1);
    assert_int_equal(resp_store_get(s, "resp_1", "alice", 1000, &row), 1);
    /* writing an id again replaces it, and the running total follows */
    put_ok(s, "resp_r", "alice", 1000, "{\"v\":1}");
    put_ok(s, "resp_r", "alice", 1001, "{\"v\":22}");
    int64_t n, bytes;
    assert_int_equal(resp_store_stats(s, &n, &bytes), 0);
    assert_int_equal(n, 1);
    assert_int_equal(bytes, (int64_t)(strlen("{\"v\":22}") + strlen("[]") + strlen("[{\"type\":\"message\"}]")));
    assert_int_equal(resp_store_delete(s, "resp_r", "alice"), 0);
    assert_int_equal(resp_store_stats(s, &n, &bytes), 0);
    assert_int_equal(bytes, 0);
    /* strings bind as data, not SQL */
    put_ok(s, "resp_'x\"; DROP TABLE responses;--", "o'wner", 1000, "{}");
    assert_int_equal(resp_store_get(s, "resp_'x\"; DROP TABLE responses;--", "o'wner", 1000, &row), 0);
    resp_store_row_free(&row);
    resp_store_close(&s);
    assert_null(s);
}

static void test_max_age(void **st)
{
    resp_store_t *s = open_ok(":memory:", 100, 0);
    put_ok(s, "resp_old", "a", 1000, "{}");
    put_ok(s, "resp_new", "a", 1090, "{}");
    resp_store_row_t row;
    assert_int_equal(resp_store_get(s, "resp_old", "a", 1100, &row), 0); /* exactly max_age old */
    resp_store_row_free(&row);
    assert_int_equal(resp_store_get(s, "resp_old", "a", 1101, &row), 1); /* expired: never returned */
    assert_int_equal(resp_store_get(s, "resp_new", "a", 1101, &row), 0);
    resp_store_row_free(&row);
    int64_t n, bytes;
    assert_int_equal(resp_store_stats(s, &n, &bytes), 0);
    assert_int_equal(n, 2);
    /* the next put deletes it */
    put_ok(s, "resp_3", "a", 1150, "{}");
    assert_int_equal(resp_store_stats(s, &n, &bytes), 0);
    assert_int_equal(n, 2);
    assert_int_equal(resp_store_get(s, "resp_old", "a", 1000, &row), 1);
    resp_store_close(&s);
}

static void test_size_cap(void **st)
{
    /* each row: 100-byte response + "[]" + 20-byte context = 122 bytes */
    resp_store_t *s = open_ok(":memory:", 0, 500);
    char body[101];
    memset(body, 'x', 100);
    body[100] = '\0';
    char err[256];
    for (int i = 0; i < 6; i++) {
        char id[16];
        snprintf(id, sizeof id, "resp_%d", i);
        put_ok(s, id, "a", 1000 + i, body);
        int64_t n, bytes;
        assert_int_equal(resp_store_stats(s, &n, &bytes), 0);
        assert_true(bytes <= 500);
        /* 4 × 122 = 488 fit; the 5th is over, the oldest go until ≤ 450 (90%): 3 left */
        static const int64_t want[] = {1, 2, 3, 4, 3, 4};
        assert_int_equal(n, want[i]);
        /* the running total equals the sum of the rows */
        assert_int_equal(bytes, n * 122);
    }
    resp_store_row_t row;
    assert_int_equal(resp_store_get(s, "resp_0", "a", 1010, &row), 1);
    assert_int_equal(resp_store_get(s, "resp_1", "a", 1010, &row), 1);
    for (int i = 2; i < 6; i++) {
        char id[16];
        snprintf(id, sizeof id, "resp_%d", i);
        assert_int_equal(resp_store_get(s, id, "a", 1010, &row), 0);
        resp_store_row_free(&row);
    }
    /* one row larger than the cap is refused, nothing is evicted for it */
    char big[600];
    memset(big, 'y', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    err[0] = '\0';
    assert_int_equal(put(s, "resp_big", "a", 1020, big, "[]", err, sizeof err), 1);
    assert_non_null(strstr(err, "cap"));
    assert_int_equal(resp_store_get(s, "resp_big", "a", 1020, &row), 1);
    assert_int_equal(resp_store_get(s, "resp_5", "a", 1020, &row), 0);
    resp_store_row_free(&row);
    resp_store_close(&s);
}

static void test_reopen(void **st)
{
    char path[128];
    path_of(path, sizeof path, "reopen.sqlite3");
    resp_store_t *s = open_ok(path, 0, 0);
    put_ok(s, "resp_keep", "k", 5000, "{\"kept\":true}");
    resp_store_close(&s);
    s = open_ok(path, 0, 0);
    resp_store_row_t row;
    assert_int_equal(resp_store_get(s, "resp_keep", "k", 5000, &row), 0);
    assert_string_equal(row.response, "{\"kept\":true}");
    resp_store_row_free(&row);
    resp_store_close(&s);
    /* WAL mode is a property of the file */
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *q;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &q, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(q, 0), "wal");
    sqlite3_finalize(q);
    sqlite3_close(db);
    /* a path that cannot be a database is an error, not a crash */
    char err[256] = "";
    resp_store_t *bad = NULL;
    assert_int_equal(resp_store_open("/nonexistent-dir/x/y.sqlite3", NULL, &bad, err, sizeof err), -1);
    assert_null(bad);
    assert_true(strlen(err) > 0);
}

/* A writer killed with SIGKILL right after its puts returned: every row it
 * committed is there for the next opener. */
static void test_kill9_keeps_rows(void **st)
{
    char path[128];
    path_of(path, sizeof path, "kill.sqlite3");
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        resp_store_t *s = NULL;
        if (resp_store_open(path, NULL, &s, NULL, 0) != 0)
            _exit(1);
        for (int i = 0; i < 50; i++) {
            char id[32];
            snprintf(id, sizeof id, "resp_k%d", i);
            if (put(s, id, "o", 7000, "{\"x\":1}", "[]", NULL, 0) != 0)
                _exit(2);
        }
        raise(SIGKILL); /* no close, no checkpoint */
        _exit(3);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    resp_store_t *s = open_ok(path, 0, 0);
    int64_t n, bytes;
    assert_int_equal(resp_store_stats(s, &n, &bytes), 0);
    assert_int_equal(n, 50);
    resp_store_row_t row;
    assert_int_equal(resp_store_get(s, "resp_k49", "o", 7000, &row), 0);
    resp_store_row_free(&row);
    resp_store_close(&s);
}

/* Two processes, each with its own handle, write to one file at the same
 * time (a busy lock is waited for, never an error). */
static void test_two_writers(void **st)
{
    char path[128];
    path_of(path, sizeof path, "shared.sqlite3");
    enum { N = 300 };
    resp_store_t *s = open_ok(path, 0, 0); /* creates the file first */
    /* The store has a writer thread: fork only while this process has none
     * (a child forked beside a running thread can inherit a held allocator
     * lock and hang, as it did under ASan). Both start writing together. */
    resp_store_close(&s);
    int go[2];
    assert_int_equal(pipe(go), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char ch;
        close(go[1]);
        if (read(go[0], &ch, 1) != 0)
            _exit(3);
        resp_store_t *c = NULL;
        if (resp_store_open(path, NULL, &c, NULL, 0) != 0)
            _exit(1);
        for (int i = 0; i < N; i++) {
            char id[32];
            snprintf(id, sizeof id, "resp_child%d", i);
            if (put(c, id, "child", 8000 + i, "{\"w\":\"child\"}", "[]", NULL, 0) != 0)
                _exit(2);
        }
        resp_store_close(&c);
        _exit(0);
    }
    close(go[0]);
    s = open_ok(path, 0, 0);
    close(go[1]); /* releases the child */
    for (int i = 0; i < N; i++) {
        char id[32];
        snprintf(id, sizeof id, "resp_parent%d", i);
        put_ok(s, id, "parent", 8000 + i, "{\"w\":\"parent\"}");
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    int64_t n, bytes;
    assert_int_equal(resp_store_stats(s, &n, &bytes), 0);
    assert_int_equal(n, 2 * N);
    resp_store_row_t row;
    assert_int_equal(resp_store_get(s, "resp_child299", "child", 8300, &row), 0);
    assert_string_equal(row.response, "{\"w\":\"child\"}");
    resp_store_row_free(&row);
    assert_int_equal(resp_store_get(s, "resp_child299", "parent", 8300, &row), 1);
    resp_store_close(&s);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *q;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &q, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(q, 0), "ok");
    sqlite3_finalize(q);
    sqlite3_close(db);
}

/* Processes opening one new file at the same moment (two gateways on one
 * state directory, or a restart while the old one still closes): each must
 * open it. The first open switches the file to WAL, which needs an
 * exclusive lock; SQLite answers SQLITE_BUSY to the others at once (its
 * busy handler is not called there), so before the fix one of two gateways
 * started in the same millisecond failed with "database is locked"
 * (grammar.sh, make check). 30 rounds of 6 processes released together by
 * a pipe. */
static void test_concurrent_open(void **st)
{
    enum { ROUNDS = 30, P = 6 };
    for (int r = 0; r < ROUNDS; r++) {
        char path[128];
        snprintf(path, sizeof path, "%s/race%d.sqlite3", dir, r);
        int go[2];
        assert_int_equal(pipe(go), 0);
        pid_t pids[P];
        for (int i = 0; i < P; i++) {
            pids[i] = fork();
            assert_true(pids[i] >= 0);
            if (pids[i] == 0) {
                char c;
                close(go[1]);
                if (read(go[0], &c, 1) != 0) /* EOF: all released at once */
                    _exit(3);
                resp_store_t *s = NULL;
                char err[256] = "";
                if (resp_store_open(path, NULL, &s, err, sizeof err) != 0) {
                    fprintf(stderr, "open: %s\n", err);
                    _exit(1);
                }
                int rc = put(s, "resp_x", "o", 1000, "{}", "[]", NULL, 0) == 0 ? 0 : 2;
                resp_store_close(&s);
                _exit(rc);
            }
        }
        close(go[0]);
        close(go[1]);
        for (int i = 0; i < P; i++) {
            int status;
            assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
            assert_true(WIFEXITED(status));
            assert_int_equal(WEXITSTATUS(status), 0);
        }
    }
}

static resp_store_t *open_cfg(const char *path, const resp_store_config_t *cfg)
{
    resp_store_t *s = NULL;
    char err[256] = "";
    if (resp_store_open(path, cfg, &s, err, sizeof err) != 0)
        fail_msg("open %s: %s", path, err);
    return s;
}

/* A put with a parent: its response holds one output message `out`. */
static int put_step(resp_store_t *s, const char *id, const char *owner, int64_t now, const char *parent,
                    const char *in, const char *out, const char *prev_ctx)
{
    size_t nr = strlen(id) + strlen(out) + 64, ni = strlen(in) + 64;
    char *resp = malloc(nr), *input = malloc(ni);
    snprintf(resp, nr, "{\"id\":\"%s\",\"output\":[{\"type\":\"message\",\"t\":\"%s\"}]}", id, out);
    snprintf(input, ni, "[{\"type\":\"message\",\"t\":\"%s\"}]", in);
    resp_store_put_t p = {.id = id, .owner = owner, .now_s = now, .response = resp, .input = input,
                          .parent = parent, .context = prev_ctx};
    char err[256] = "";
    int rc = resp_store_put(s, &p, err, sizeof err);
    if (rc != 0)
        print_message("put %s: %d %s\n", id, rc, err);
    free(resp);
    free(input);
    return rc;
}

/* The "t" of every item of id's conversation, joined by commas. */
static void chain_text(resp_store_t *s, const char *id, const char *owner, int64_t now, char *out, size_t n)
{
    json_t *ctx = NULL;
    assert_int_equal(resp_store_context(s, id, owner, now, &ctx), 0);
    out[0] = 0;
    size_t i;
    json_t *it;
    json_array_foreach(ctx, i, it) {
        size_t l = strlen(out);
        snprintf(out + l, n - l, "%s%s", i ? "," : "", json_string_value(json_object_get(it, "t")));
    }
    json_decref(ctx);
}

/* Chains as deltas: each step stores only its own items, the walk puts the
 * conversation back together; a parent deleted by its owner is hidden but
 * still continues its child; a parent gone before the child is written
 * makes the child carry the whole conversation (prefix). */
static void test_chain_deltas(void **st)
{
    resp_store_t *s = open_ok(":memory:", 0, 0);
    const int64_t t = (int64_t)time(NULL);
    assert_int_equal(put_step(s, "resp_a", "k", t + 0, NULL, "u1", "a1", NULL), 0);
    assert_int_equal(put_step(s, "resp_b", "k", t + 1, "resp_a", "u2", "a2", "[]"), 0);
    assert_int_equal(put_step(s, "resp_c", "k", t + 2, "resp_b", "u3", "a3", "[]"), 0);
    char text[512];
    chain_text(s, "resp_c", "k", t + 2, text, sizeof text);
    assert_string_equal(text, "u1,a1,u2,a2,u3,a3");
    /* another key cannot continue it */
    json_t *ctx = NULL;
    assert_int_equal(resp_store_context(s, "resp_c", "other", t + 2, &ctx), 1);
    /* deleting the middle: hidden (404), its child still whole */
    assert_int_equal(resp_store_delete(s, "resp_b", "k"), 0);
    resp_store_row_t row;
    assert_int_equal(resp_store_get(s, "resp_b", "k", t + 2, &row), 1);
    assert_int_equal(resp_store_context(s, "resp_b", "k", t + 2, &ctx), 1);
    chain_text(s, "resp_c", "k", t + 2, text, sizeof text);
    assert_string_equal(text, "u1,a1,u2,a2,u3,a3");
    /* deleting the leaf takes the hidden parent with it; resp_a stays */
    assert_int_equal(resp_store_delete(s, "resp_c", "k"), 0);
    int64_t n, bytes;
    assert_int_equal(resp_store_stats(s, &n, &bytes), 0);
    assert_int_equal(n, 1);
    /* a parent that is not there: the whole conversation goes in the prefix */
    assert_int_equal(put_step(s, "resp_d", "k", t + 3, "resp_gone",
                              "u4", "a4", "[{\"t\":\"x1\"},{\"t\":\"x2\"}]"), 0);
    chain_text(s, "resp_d", "k", t + 3, text, sizeof text);
    assert_string_equal(text, "x1,x2,u4,a4");
    resp_store_close(&s);
}

/* As a tenant would: key A's big stores evict only A's responses (its
 * quota and the global cap), never key B's; a response larger than A's
 * quota is refused, not stored over B; the count quota too. */
static void test_key_quota(void **st)
{
    resp_store_config_t cfg = {.max_bytes = 40000, .key_max_bytes = 20000, .key_max_count = 50};
    resp_store_t *s = open_cfg(":memory:", &cfg);
    assert_int_equal(put_step(s, "resp_b", "B", 1000, NULL, "b's question", "b's answer", NULL), 0);
    char big[4200];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = 0;
    for (int i = 0; i < 40; i++) {
        char id[32];
        snprintf(id, sizeof id, "resp_a%d", i);
        assert_int_equal(put_step(s, id, "A", 1001 + i, NULL, big, "x", NULL), 0);
        int64_t n, bytes;
        assert_int_equal(resp_store_owner_stats(s, "A", &n, &bytes), 0);
        assert_true(bytes <= cfg.key_max_bytes);
    }
    resp_store_row_t row;
    assert_int_equal(resp_store_get(s, "resp_b", "B", 1100, &row), 0); /* B's response survived */
    resp_store_row_free(&row);
    assert_int_equal(resp_store_get(s, "resp_a39", "A", 1100, &row), 0);
    resp_store_row_free(&row);
    assert_int_equal(resp_store_get(s, "resp_a0", "A", 1100, &row), 1); /* A's oldest went */
    /* larger than A's quota: refused */
    char huge[25000];
    memset(huge, 'h', sizeof huge - 1);
    huge[sizeof huge - 1] = 0;
    assert_int_equal(put_step(s, "resp_huge", "A", 1200, NULL, huge, "x", NULL), RESP_STORE_TOO_LARGE);
    assert_int_equal(resp_store_get(s, "resp_b", "B", 1200, &row), 0);
    resp_store_row_free(&row);
    /* the count quota */
    for (int i = 0; i < 60; i++) {
        char id[32];
        snprintf(id, sizeof id, "resp_c%d", i);
        assert_int_equal(put_step(s, id, "C", 1300 + i, NULL, "q", "a", NULL), 0);
    }
    int64_t n, bytes;
    assert_int_equal(resp_store_owner_stats(s, "C", &n, &bytes), 0);
    assert_true(n <= 50);
    resp_store_close(&s);

    /* the global cap full of other keys' responses: refused, nobody evicted */
    resp_store_config_t g = {.max_bytes = 12000, .key_max_bytes = 10000};
    s = open_cfg(":memory:", &g);
    assert_int_equal(put_step(s, "resp_b1", "B", 1000, NULL, big, "x", NULL), 0);
    assert_int_equal(put_step(s, "resp_b2", "B", 1001, NULL, big, "x", NULL), 0);
    char err[256] = "";
    resp_store_put_t p = {.id = "resp_a", .owner = "A", .now_s = 1002, .response = "{\"output\":[]}", .input = big};
    assert_int_equal(resp_store_put(s, &p, err, sizeof err), RESP_STORE_FULL);
    assert_non_null(strstr(err, "full"));
    assert_int_equal(resp_store_get(s, "resp_b1", "B", 1003, &row), 0);
    resp_store_row_free(&row);
    assert_int_equal(resp_store_get(s, "resp_a", "A", 1003, &row), 1);
    resp_store_close(&s);
}

/* Another process's connection holds the write lock: a put waits at most
 * the store's wait and answers BUSY (not stored, never acknowledged), while
 * reads go on meanwhile; after the lock is released puts work again. */
static void test_busy_lock(void **st)
{
    char path[128];
    path_of(path, sizeof path, "busy.sqlite3");
    resp_store_config_t cfg = {.busy_timeout_ms = 200};
    resp_store_t *s = open_cfg(path, &cfg);
    put_ok(s, "resp_1", "o", 1000, "{\"output\":[]}");
    sqlite3 *other;
    assert_int_equal(sqlite3_open(path, &other), SQLITE_OK);
    assert_int_equal(sqlite3_exec(other, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
    char err[256] = "";
    resp_store_put_t p = {.id = "resp_2", .owner = "o", .now_s = 1001, .response = "{\"output\":[]}", .input = "[]"};
    assert_int_equal(resp_store_put(s, &p, err, sizeof err), RESP_STORE_BUSY);
    assert_non_null(strstr(err, "lock"));
    resp_store_row_t row;
    assert_int_equal(resp_store_get(s, "resp_1", "o", 1001, &row), 0); /* reads are not held up */
    resp_store_row_free(&row);
    assert_int_equal(sqlite3_exec(other, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(other);
    assert_int_equal(resp_store_get(s, "resp_2", "o", 1001, &row), 1);
    assert_int_equal(resp_store_put(s, &p, err, sizeof err), RESP_STORE_OK);
    assert_int_equal(resp_store_get(s, "resp_2", "o", 1001, &row), 0);
    resp_store_row_free(&row);
    resp_store_close(&s);
}

/* A schema-1 file (whole conversations in `context`) opens as schema 2:
 * rows readable, their conversations unchanged, totals right. */
static void test_migrate_v1(void **st)
{
    char path[128];
    path_of(path, sizeof path, "v1.sqlite3");
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
        "CREATE TABLE responses(id TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL, created_s INTEGER NOT NULL,"
        " response TEXT NOT NULL, input TEXT NOT NULL, context TEXT NOT NULL, bytes INTEGER NOT NULL);"
        "CREATE TABLE totals(k INTEGER PRIMARY KEY CHECK (k = 0), bytes INTEGER NOT NULL);"
        "INSERT INTO responses VALUES('resp_1', 'o', 1000, '{\"output\":[{\"t\":\"a2\"}]}', '[{\"t\":\"u2\"}]',"
        " '[{\"t\":\"u1\"},{\"t\":\"a1\"},{\"t\":\"u2\"},{\"t\":\"a2\"}]', 99);"
        "INSERT INTO totals VALUES(0, 99);", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    resp_store_t *s = open_ok(path, 0, 0);
    char text[256];
    chain_text(s, "resp_1", "o", 1000, text, sizeof text);
    assert_string_equal(text, "u1,a1,u2,a2");
    int64_t n, bytes;
    assert_int_equal(resp_store_stats(s, &n, &bytes), 0);
    assert_int_equal(n, 1);
    assert_int_equal(bytes, (int64_t)(strlen("{\"output\":[{\"t\":\"a2\"}]}") + strlen("[{\"t\":\"u2\"}]") +
                                      strlen("[{\"t\":\"u1\"},{\"t\":\"a1\"}]")));
    resp_store_close(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_and_owners),
        cmocka_unit_test(test_chain_deltas),
        cmocka_unit_test(test_key_quota),
        cmocka_unit_test(test_busy_lock),
        cmocka_unit_test(test_migrate_v1),
        cmocka_unit_test(test_max_age),
        cmocka_unit_test(test_size_cap),
        cmocka_unit_test(test_reopen),
        cmocka_unit_test(test_kill9_keeps_rows),
        cmocka_unit_test(test_two_writers),
        cmocka_unit_test(test_concurrent_open),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
