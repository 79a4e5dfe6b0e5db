/* resp_store.c — stored Responses API responses in SQLite (see resp_store.h).
 * One connection per handle, guarded by a mutex; writes in BEGIN IMMEDIATE
 * transactions so that gateways sharing the file take turns. */
#include "gateway/resp_store.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/errbuf.h"
#include "common/log.h"
#include "common/xalloc.h"

struct resp_store {
    sqlite3 *db;
    pthread_mutex_t lock;   /* one statement at a time on db */
    int64_t max_age_s;
    int64_t max_bytes;
    char path[512];         /* for log messages */
};

static const char SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS responses("
    " id TEXT PRIMARY KEY NOT NULL,"
    " owner TEXT NOT NULL,"
    " created_s INTEGER NOT NULL,"
    " response TEXT NOT NULL,"
    " input TEXT NOT NULL,"
    " context TEXT NOT NULL,"
    " bytes INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS responses_created ON responses(created_s);"
    /* the running total of bytes, kept by triggers, so a put checks the cap
     * without summing the table */
    "CREATE TABLE IF NOT EXISTS totals(k INTEGER PRIMARY KEY CHECK (k = 0), bytes INTEGER NOT NULL);"
    "INSERT OR IGNORE INTO totals(k, bytes) SELECT 0, COALESCE(SUM(bytes), 0) FROM responses;"
    "CREATE TRIGGER IF NOT EXISTS responses_ins AFTER INSERT ON responses"
    " BEGIN UPDATE totals SET bytes = bytes + new.bytes WHERE k = 0; END;"
    "CREATE TRIGGER IF NOT EXISTS responses_del AFTER DELETE ON responses"
    " BEGIN UPDATE totals SET bytes = bytes - old.bytes WHERE k = 0; END;";

/* Runs SQL without results; -1 (logged, err filled) on failure. */
static int exec(resp_store_t *s, const char *sql, char *err, size_t errlen)
{
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) == SQLITE_OK)
        return 0;
    log_error("responses store %s: %s: %s", s->path, sql, msg ? msg : "?");
    errbuf_set(err, errlen, "%s", msg ? msg : "SQLite error");
    sqlite3_free(msg);
    return -1;
}

static int fail(resp_store_t *s, const char *what, char *err, size_t errlen)
{
    const char *msg = sqlite3_errmsg(s->db);
    log_error("responses store %s: %s: %s", s->path, what, msg);
    return errbuf_set(err, errlen, "%s: %s", what, msg);
}

int resp_store_open(const char *path, const resp_store_config_t *cfg, resp_store_t **out, char *err,
                    size_t errlen)
{
    *out = NULL;
    resp_store_t *s = xcalloc(1, sizeof *s);
    pthread_mutex_init(&s->lock, NULL);
    snprintf(s->path, sizeof s->path, "%s", path);
    s->max_age_s = cfg && cfg->max_age_s > 0 ? cfg->max_age_s : RESP_STORE_DEFAULT_MAX_AGE_S;
    s->max_bytes = cfg && cfg->max_bytes > 0 ? cfg->max_bytes : RESP_STORE_DEFAULT_MAX_BYTES;
    int busy = cfg && cfg->busy_timeout_ms > 0 ? cfg->busy_timeout_ms : RESP_STORE_DEFAULT_BUSY_MS;
    /* a new file is created private (0600): it holds users' conversations;
     * SQLite gives the -wal and -shm files the same mode */
    if (strcmp(path, ":memory:") != 0) {
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0) {
            errbuf_set(err, errlen, "cannot open %s: %s", path, strerror(errno));
            goto err;
        }
        close(fd);
    }
    /* NOMUTEX: our own mutex serializes the handle */
    int rc = sqlite3_open_v2(path, &s->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        errbuf_set(err, errlen, "cannot open %s: %s", path, s->db ? sqlite3_errmsg(s->db) : "out of memory");
        goto err;
    }
    sqlite3_busy_timeout(s->db, busy);
    /* journal_mode answers a row ("wal", or "memory" for :memory:). The
     * switch to WAL needs an exclusive lock, and while another connection
     * holds one SQLite answers SQLITE_BUSY at once instead of calling the
     * busy handler (two gateways starting on one state directory, or a
     * restart while the old process still closes): retried here until
     * the busy timeout */
    sqlite3_stmt *st = NULL;
    const int64_t give_up = clock_now_us() + (int64_t)busy * 1000;
    for (;;) {
        if (sqlite3_prepare_v2(s->db, "PRAGMA journal_mode=WAL", -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW)
            break;
        const int code = sqlite3_errcode(s->db);
        sqlite3_finalize(st);
        st = NULL;
        if ((code != SQLITE_BUSY && code != SQLITE_LOCKED) || clock_now_us() >= give_up) {
            fail(s, "PRAGMA journal_mode=WAL", err, errlen);
            goto err;
        }
        clock_sleep_us(2000);
    }
    const char *mode = (const char *)sqlite3_column_text(st, 0);
    bool mem = strcmp(path, ":memory:") == 0;
    if (!mode || (strcmp(mode, "wal") != 0 && !mem)) {
        errbuf_set(err, errlen, "%s: cannot switch to WAL mode (journal_mode is %s)", path,
                   mode ? mode : "?");
        sqlite3_finalize(st);
        goto err;
    }
    sqlite3_finalize(st);
    /* recursive_triggers: the rows INSERT OR REPLACE deletes fire the delete
     * trigger, so the total stays right */
    if (exec(s, "PRAGMA synchronous=NORMAL", err, errlen) < 0 ||
        exec(s, "PRAGMA recursive_triggers=ON", err, errlen) < 0 ||
        exec(s, "BEGIN IMMEDIATE", err, errlen) < 0)
        goto err;
    if (exec(s, SCHEMA, err, errlen) < 0) {
        exec(s, "ROLLBACK", NULL, 0);
        goto err;
    }
    if (exec(s, "COMMIT", err, errlen) < 0)
        goto err;
    *out = s;
    return 0;
err:
    resp_store_close(&s);
    return -1;
}

void resp_store_close(resp_store_t **sp)
{
    resp_store_t *s = *sp;
    if (!s)
        return;
    *sp = NULL;
    if (s->db)
        sqlite3_close_v2(s->db);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* A prepared statement, or NULL (logged). */
static sqlite3_stmt *prep(resp_store_t *s, const char *sql)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
        fail(s, sql, NULL, 0);
        return NULL;
    }
    return st;
}

/* Runs a prepared statement that returns no rows; finalizes it. */
static int run(resp_store_t *s, sqlite3_stmt *st, const char *what, char *err, size_t errlen)
{
    if (!st)
        return errbuf_set(err, errlen, "%s: cannot prepare", what);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return fail(s, what, err, errlen);
    return 0;
}

int resp_store_put(resp_store_t *s, const char *id, const char *owner, int64_t now_s,
                   const char *response, const char *input, const char *context, char *err,
                   size_t errlen)
{
    int64_t bytes = (int64_t)(strlen(response) + strlen(input) + strlen(context));
    if (bytes > s->max_bytes) {
        errbuf_set(err, errlen, "the response (%lld bytes with its conversation) exceeds the "
                                "store's cap of %lld bytes", (long long)bytes, (long long)s->max_bytes);
        return 1;
    }
    pthread_mutex_lock(&s->lock);
    int rc = -1;
    if (exec(s, "BEGIN IMMEDIATE", err, errlen) < 0)
        goto out;
    sqlite3_stmt *st = prep(s, "DELETE FROM responses WHERE created_s < ?1");
    if (st)
        sqlite3_bind_int64(st, 1, now_s - s->max_age_s);
    if (run(s, st, "expire", err, errlen) < 0)
        goto rollback;
    st = prep(s, "INSERT OR REPLACE INTO responses(id, owner, created_s, response, input, context, bytes)"
                 " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
    if (st) {
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, owner, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, now_s);
        sqlite3_bind_text(st, 4, response, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 5, input, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 6, context, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 7, bytes);
    }
    if (run(s, st, "insert", err, errlen) < 0)
        goto rollback;
    /* over the cap: drop the oldest rows (not the one just written) until
     * the total is 90% of the cap, so the scan behind it runs once per ~10%
     * of the cap written, not at every put */
    int64_t total = 0;
    st = prep(s, "SELECT bytes FROM totals WHERE k = 0");
    if (!st || sqlite3_step(st) != SQLITE_ROW) {
        sqlite3_finalize(st);
        fail(s, "total", err, errlen);
        goto rollback;
    }
    total = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    if (total > s->max_bytes) {
        st = prep(s, "DELETE FROM responses WHERE id IN ("
                     " SELECT id FROM (SELECT id, SUM(bytes) OVER (ORDER BY created_s DESC, rowid DESC"
                     "  ROWS UNBOUNDED PRECEDING) AS total FROM responses) WHERE total > ?1) AND id <> ?2");
        if (st) {
            sqlite3_bind_int64(st, 1, s->max_bytes - s->max_bytes / 10);
            sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
        }
        if (run(s, st, "cap", err, errlen) < 0)
            goto rollback;
    }
    if (exec(s, "COMMIT", err, errlen) < 0)
        goto rollback;
    rc = 0;
    goto out;
rollback:
    exec(s, "ROLLBACK", NULL, 0);
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static char *col_dup(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return xstrdup(t ? (const char *)t : "");
}

int resp_store_get(resp_store_t *s, const char *id, const char *owner, int64_t now_s,
                   resp_store_row_t *row)
{
    memset(row, 0, sizeof *row);
    pthread_mutex_lock(&s->lock);
    int rc = -1;
    sqlite3_stmt *st = prep(s, "SELECT response, input, context, created_s FROM responses"
                               " WHERE id = ?1 AND owner = ?2 AND created_s >= ?3");
    if (!st)
        goto out;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, owner, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, now_s - s->max_age_s);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        row->response = col_dup(st, 0);
        row->input = col_dup(st, 1);
        row->context = col_dup(st, 2);
        row->created_s = sqlite3_column_int64(st, 3);
        rc = 0;
    } else if (step == SQLITE_DONE) {
        rc = 1;
    } else {
        fail(s, "select", NULL, 0);
    }
    sqlite3_finalize(st);
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int resp_store_delete(resp_store_t *s, const char *id, const char *owner)
{
    pthread_mutex_lock(&s->lock);
    int rc = -1;
    sqlite3_stmt *st = prep(s, "DELETE FROM responses WHERE id = ?1 AND owner = ?2");
    if (st) {
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, owner, -1, SQLITE_STATIC);
        if (sqlite3_step(st) == SQLITE_DONE)
            rc = sqlite3_changes(s->db) > 0 ? 0 : 1;
        else
            fail(s, "delete", NULL, 0);
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int resp_store_stats(resp_store_t *s, int64_t *n_rows, int64_t *n_bytes)
{
    pthread_mutex_lock(&s->lock);
    int rc = -1;
    sqlite3_stmt *st = prep(s, "SELECT (SELECT COUNT(*) FROM responses), (SELECT bytes FROM totals WHERE k = 0)");
    if (st && sqlite3_step(st) == SQLITE_ROW) {
        *n_rows = sqlite3_column_int64(st, 0);
        *n_bytes = sqlite3_column_int64(st, 1);
        rc = 0;
    } else if (st) {
        fail(s, "stats", NULL, 0);
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void resp_store_row_free(resp_store_row_t *row)
{
    if (!row)
        return;
    free(row->response);
    free(row->input);
    free(row->context);
    memset(row, 0, sizeof *row);
}
