/* Unit tests for gateway/resp_store: round trip, owner isolation, max-age
 * expiry (driven by the now_s argument, no sleeping), the size cap, reopen
 * after close and after a writer was killed with SIGKILL, two processes
 * writing to one file at once (rows all there, integrity_check ok), and
 * processes opening one new file at the same moment. */
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
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_and_owners),
        cmocka_unit_test(test_max_age),
        cmocka_unit_test(test_size_cap),
        cmocka_unit_test(test_reopen),
        cmocka_unit_test(test_kill9_keeps_rows),
        cmocka_unit_test(test_two_writers),
        cmocka_unit_test(test_concurrent_open),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
