/* resp_store.c — stored Responses API responses in SQLite (see resp_store.h).
 * Two connections per handle: `rdb` for reads (any thread, under rlock) and
 * `wdb` for the writer thread's transactions (BEGIN IMMEDIATE), so that a
 * write waiting for another process's lock never holds up a read. ":memory:"
 * has one connection, shared under rlock (no other process can lock it). */
#include "gateway/resp_store.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/errbuf.h"
#include "common/log.h"
#include "common/xalloc.h"

#define SWEEP_EVERY_S 60 /* expired rows are looked for at most this often */
#define SCHEMA_VERSION 2

/* One write for the writer thread. Shared by the submitter and the queue
 * (refs); every field below `lock` is guarded by it. */
struct resp_store_job {
    bool is_delete;
    char *id, *owner, *response, *input, *parent, *context;
    int64_t now_s;
    int64_t deadline_us;      /* gives up waiting for the lock at this time */
    pthread_mutex_t lock;
    pthread_cond_t cond;      /* resp_store_put's wait */
    int refs;
    int rc;                   /* RESP_STORE_PENDING until done */
    char err[256];
    void (*done)(void *ctx);  /* NULL once released */
    void *done_ctx;
};

struct resp_store {
    sqlite3 *rdb, *wdb;       /* reads / the writer's (the same for :memory:) */
    bool mem;
    pthread_mutex_t rlock;    /* one statement at a time on rdb */
    int64_t max_age_s, max_bytes, key_max_bytes, key_max_count;
    int busy_ms;
    int64_t last_sweep_s;     /* writer thread only */
    /* the writer's queue: a ring of RESP_STORE_QUEUE jobs */
    pthread_mutex_t qlock;
    pthread_cond_t qcond;
    resp_store_job_t *q[RESP_STORE_QUEUE];
    size_t q_head, q_len;
    bool stop;
    pthread_t writer;
    bool writer_started;
    char path[512];           /* for log messages */
};

static const char SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS responses("
    " id TEXT PRIMARY KEY NOT NULL,"
    " owner TEXT NOT NULL,"
    " created_s INTEGER NOT NULL,"
    " response TEXT NOT NULL,"
    " input TEXT NOT NULL,"
    " prefix TEXT NOT NULL,"
    " bytes INTEGER NOT NULL,"
    " parent TEXT,"
    " depth INTEGER NOT NULL DEFAULT 0,"
    " gone INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX IF NOT EXISTS responses_created ON responses(created_s);"
    "CREATE INDEX IF NOT EXISTS responses_owner ON responses(owner, created_s);"
    "CREATE INDEX IF NOT EXISTS responses_parent ON responses(parent);"
    /* running totals, kept by triggers, so a put checks its caps without
     * summing the table */
    "CREATE TABLE IF NOT EXISTS totals(k INTEGER PRIMARY KEY CHECK (k = 0), bytes INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS owners(owner TEXT PRIMARY KEY NOT NULL, bytes INTEGER NOT NULL,"
    " n INTEGER NOT NULL);"
    "DROP TRIGGER IF EXISTS responses_ins;"
    "DROP TRIGGER IF EXISTS responses_del;"
    "CREATE TRIGGER responses_ins AFTER INSERT ON responses BEGIN"
    " UPDATE totals SET bytes = bytes + new.bytes WHERE k = 0;"
    " INSERT INTO owners(owner, bytes, n) VALUES (new.owner, new.bytes, 1)"
    "  ON CONFLICT(owner) DO UPDATE SET bytes = bytes + new.bytes, n = n + 1; END;"
    "CREATE TRIGGER responses_del AFTER DELETE ON responses BEGIN"
    " UPDATE totals SET bytes = bytes - old.bytes WHERE k = 0;"
    " UPDATE owners SET bytes = bytes - old.bytes, n = n - 1 WHERE owner = old.owner; END;"
    "CREATE TRIGGER IF NOT EXISTS responses_upd AFTER UPDATE OF bytes ON responses BEGIN"
    " UPDATE totals SET bytes = bytes - old.bytes + new.bytes WHERE k = 0;"
    " UPDATE owners SET bytes = bytes - old.bytes + new.bytes WHERE owner = old.owner; END;";

/* ---- small helpers ------------------------------------------------------ */

/* Runs SQL without results; -1 (logged, err filled) on failure. */
static int exec(resp_store_t *s, sqlite3 *db, const char *sql, char *err, size_t errlen)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK)
        return 0;
    log_error("responses store %s: %s: %s", s->path, sql, msg ? msg : "?");
    errbuf_set(err, errlen, "%s", msg ? msg : "SQLite error");
    sqlite3_free(msg);
    return -1;
}

static int fail(resp_store_t *s, sqlite3 *db, const char *what, char *err, size_t errlen)
{
    const char *msg = sqlite3_errmsg(db);
    log_error("responses store %s: %s: %s", s->path, what, msg);
    return errbuf_set(err, errlen, "%s: %s", what, msg);
}

/* A prepared statement, or NULL (logged). */
static sqlite3_stmt *prep(resp_store_t *s, sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        fail(s, db, sql, NULL, 0);
        return NULL;
    }
    return st;
}

static char *col_dup(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return xstrdup(t ? (const char *)t : "");
}

/* An SQLite result code → ours: FULL, BUSY, or -1. */
static int code_of(int sqlite_rc)
{
    switch (sqlite_rc & 0xff) {
    case SQLITE_FULL: return RESP_STORE_FULL;
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return RESP_STORE_BUSY;
    default: return -1;
    }
}

/* ---- open / close ------------------------------------------------------- */

/* journal_mode=WAL. The switch needs an exclusive lock, and while another
 * connection holds one SQLite answers SQLITE_BUSY at once instead of
 * calling the busy handler (two gateways starting on one state directory,
 * or a restart while the old process still closes): retried until the busy
 * timeout. */
static int set_wal(resp_store_t *s, sqlite3 *db, char *err, size_t errlen)
{
    sqlite3_stmt *st = NULL;
    const int64_t give_up = clock_now_us() + (int64_t)(s->busy_ms > 5000 ? s->busy_ms : 5000) * 1000;
    for (;;) {
        if (sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW)
            break;
        const int code = sqlite3_errcode(db);
        sqlite3_finalize(st);
        st = NULL;
        if ((code != SQLITE_BUSY && code != SQLITE_LOCKED) || clock_now_us() >= give_up)
            return fail(s, db, "PRAGMA journal_mode=WAL", err, errlen);
        clock_sleep_us(2000);
    }
    const char *mode = (const char *)sqlite3_column_text(st, 0);
    int rc = 0;
    if (!mode || (strcmp(mode, "wal") != 0 && !s->mem))
        rc = errbuf_set(err, errlen, "%s: cannot switch to WAL mode (journal_mode is %s)", s->path,
                        mode ? mode : "?");
    sqlite3_finalize(st);
    return rc;
}

static int open_conn(resp_store_t *s, const char *path, sqlite3 **db, char *err, size_t errlen)
{
    /* NOMUTEX: our own locks serialize each connection */
    int rc = sqlite3_open_v2(path, db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK)
        return errbuf_set(err, errlen, "cannot open %s: %s", path, *db ? sqlite3_errmsg(*db) : "out of memory");
    sqlite3_busy_timeout(*db, s->busy_ms > 5000 ? s->busy_ms : 5000);
    if (set_wal(s, *db, err, errlen) < 0)
        return -1;
    if (exec(s, *db, "PRAGMA synchronous=NORMAL", err, errlen) < 0 ||
        exec(s, *db, "PRAGMA recursive_triggers=ON", err, errlen) < 0)
        return -1;
    return 0;
}

/* The items of a response object's output (borrowed from resp), or NULL. */
static json_t *output_of(json_t *resp)
{
    json_t *o = json_object_get(resp, "output");
    return json_is_array(o) ? o : NULL;
}

/* Version 1 kept each response's whole conversation in `context` (through
 * its output). Version 2 keeps a prefix: the whole conversation without
 * its own input and output, and no parent — every old row starts a chain. */
static int migrate_v1(resp_store_t *s, sqlite3 *db, char *err, size_t errlen)
{
    if (exec(s, db, "ALTER TABLE responses RENAME COLUMN context TO prefix;"
                    "ALTER TABLE responses ADD COLUMN parent TEXT;"
                    "ALTER TABLE responses ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;"
                    "ALTER TABLE responses ADD COLUMN gone INTEGER NOT NULL DEFAULT 0;", err, errlen) < 0)
        return -1;
    sqlite3_stmt *sel = prep(s, db, "SELECT id, response, input, prefix FROM responses");
    sqlite3_stmt *upd = prep(s, db, "UPDATE responses SET prefix = ?2, bytes = ?3 WHERE id = ?1");
    int rc = sel && upd ? 0 : -1;
    int64_t n = 0;
    while (rc == 0 && sqlite3_step(sel) == SQLITE_ROW) {
        const char *r = (const char *)sqlite3_column_text(sel, 1), *in = (const char *)sqlite3_column_text(sel, 2),
                   *c = (const char *)sqlite3_column_text(sel, 3);
        json_t *resp = json_loads(r ? r : "", 0, NULL), *inp = json_loads(in ? in : "", 0, NULL),
               *ctx = json_loads(c ? c : "", 0, NULL);
        size_t drop = json_array_size(inp) + json_array_size(output_of(resp));
        if (json_is_array(ctx) && json_array_size(ctx) >= drop) {
            json_t *pre = json_array();
            for (size_t i = 0; i + drop < json_array_size(ctx); i++)
                json_array_append(pre, json_array_get(ctx, i));
            char *ps = json_dumps(pre, JSON_COMPACT);
            json_decref(pre);
            sqlite3_bind_text(upd, 1, (const char *)sqlite3_column_text(sel, 0), -1, SQLITE_TRANSIENT);
            sqlite3_bind_text(upd, 2, ps, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(upd, 3, (int64_t)(strlen(r) + strlen(in) + strlen(ps)));
            if (sqlite3_step(upd) != SQLITE_DONE)
                rc = fail(s, db, "migrate", err, errlen);
            sqlite3_reset(upd);
            free(ps);
            n++;
        }
        json_decref(resp);
        json_decref(inp);
        json_decref(ctx);
    }
    sqlite3_finalize(sel);
    sqlite3_finalize(upd);
    if (rc == 0)
        log_info("responses store %s: %lld responses migrated to schema 2 (chains as deltas)", s->path, (long long)n);
    return rc;
}

static int schema(resp_store_t *s, sqlite3 *db, char *err, size_t errlen)
{
    if (exec(s, db, "BEGIN IMMEDIATE", err, errlen) < 0)
        return -1;
    int version = 0;
    bool has_v1 = false;
    sqlite3_stmt *st = prep(s, db, "PRAGMA user_version");
    if (st && sqlite3_step(st) == SQLITE_ROW)
        version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    st = prep(s, db, "SELECT 1 FROM pragma_table_info('responses') WHERE name = 'context'");
    has_v1 = st && sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    if ((has_v1 && migrate_v1(s, db, err, errlen) < 0) || exec(s, db, SCHEMA, err, errlen) < 0)
        goto rollback;
    if (version < SCHEMA_VERSION &&
        exec(s, db, "DELETE FROM totals; INSERT INTO totals(k, bytes) SELECT 0, COALESCE(SUM(bytes), 0) FROM responses;"
                    "DELETE FROM owners; INSERT INTO owners(owner, bytes, n)"
                    " SELECT owner, SUM(bytes), COUNT(*) FROM responses GROUP BY owner;"
                    "PRAGMA user_version = 2;", err, errlen) < 0)
        goto rollback;
    return exec(s, db, "COMMIT", err, errlen);
rollback:
    exec(s, db, "ROLLBACK", NULL, 0);
    return -1;
}

static void *writer_main(void *arg);

int resp_store_open(const char *path, const resp_store_config_t *cfg, resp_store_t **out, char *err,
                    size_t errlen)
{
    *out = NULL;
    resp_store_t *s = xcalloc(1, sizeof *s);
    pthread_mutex_init(&s->rlock, NULL);
    pthread_mutex_init(&s->qlock, NULL);
    pthread_cond_init(&s->qcond, NULL);
    snprintf(s->path, sizeof s->path, "%s", path);
    s->max_age_s = cfg && cfg->max_age_s > 0 ? cfg->max_age_s : RESP_STORE_DEFAULT_MAX_AGE_S;
    s->max_bytes = cfg && cfg->max_bytes > 0 ? cfg->max_bytes : RESP_STORE_DEFAULT_MAX_BYTES;
    s->key_max_bytes = cfg && cfg->key_max_bytes > 0 ? cfg->key_max_bytes : RESP_STORE_DEFAULT_KEY_MAX_BYTES;
    s->key_max_count = cfg && cfg->key_max_count > 0 ? cfg->key_max_count : RESP_STORE_DEFAULT_KEY_MAX_COUNT;
    s->busy_ms = cfg && cfg->busy_timeout_ms > 0 ? cfg->busy_timeout_ms : RESP_STORE_DEFAULT_BUSY_MS;
    s->mem = strcmp(path, ":memory:") == 0;
    /* a new file is created private (0600): it holds users' conversations;
     * SQLite gives the -wal and -shm files the same mode */
    if (!s->mem) {
        int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
            errbuf_set(err, errlen, "cannot open %s: %s", path, strerror(errno));
            goto err;
        }
        close(fd);
    }
    if (open_conn(s, path, &s->wdb, err, errlen) < 0 || schema(s, s->wdb, err, errlen) < 0)
        goto err;
    if (s->mem)
        s->rdb = s->wdb;
    else if (open_conn(s, path, &s->rdb, err, errlen) < 0)
        goto err;
    if (pthread_create(&s->writer, NULL, writer_main, s) != 0) {
        errbuf_set(err, errlen, "cannot start the responses store's writer thread");
        goto err;
    }
    s->writer_started = true;
    *out = s;
    return 0;
err:
    resp_store_close(&s);
    return -1;
}

static void job_finish(resp_store_job_t *job, int rc, const char *err);
static void job_unref(resp_store_job_t *job);

void resp_store_close(resp_store_t **sp)
{
    resp_store_t *s = *sp;
    if (!s)
        return;
    *sp = NULL;
    if (s->writer_started) {
        pthread_mutex_lock(&s->qlock);
        s->stop = true;
        pthread_cond_broadcast(&s->qcond);
        pthread_mutex_unlock(&s->qlock);
        pthread_join(s->writer, NULL);
    }
    /* jobs the writer did not take */
    while (s->q_len) {
        resp_store_job_t *job = s->q[s->q_head];
        s->q_head = (s->q_head + 1) % RESP_STORE_QUEUE;
        s->q_len--;
        job_finish(job, -1, "the responses store is closing");
        job_unref(job);
    }
    if (s->rdb && s->rdb != s->wdb)
        sqlite3_close_v2(s->rdb);
    if (s->wdb)
        sqlite3_close_v2(s->wdb);
    pthread_mutex_destroy(&s->rlock);
    pthread_mutex_destroy(&s->qlock);
    pthread_cond_destroy(&s->qcond);
    free(s);
}

/* ---- jobs --------------------------------------------------------------- */

static char *dup_or_null(const char *p) { return p ? xstrdup(p) : NULL; }

static void job_unref(resp_store_job_t *job)
{
    pthread_mutex_lock(&job->lock);
    bool last = --job->refs == 0;
    pthread_mutex_unlock(&job->lock);
    if (!last)
        return;
    free(job->id);
    free(job->owner);
    free(job->response);
    free(job->input);
    free(job->parent);
    free(job->context);
    pthread_mutex_destroy(&job->lock);
    pthread_cond_destroy(&job->cond);
    free(job);
}

/* Sets the result and calls back (under the job's lock, so that a release
 * never returns while the callback runs). */
static void job_finish(resp_store_job_t *job, int rc, const char *err)
{
    pthread_mutex_lock(&job->lock);
    job->rc = rc;
    snprintf(job->err, sizeof job->err, "%s", err ? err : "");
    pthread_cond_broadcast(&job->cond);
    if (job->done)
        job->done(job->done_ctx);
    job->done = NULL;
    pthread_mutex_unlock(&job->lock);
}

static resp_store_job_t *job_new(resp_store_t *s)
{
    resp_store_job_t *job = xcalloc(1, sizeof *job);
    pthread_mutex_init(&job->lock, NULL);
    pthread_cond_init(&job->cond, NULL);
    job->refs = 1;
    job->rc = RESP_STORE_PENDING;
    job->deadline_us = clock_now_us() + (int64_t)s->busy_ms * 1000;
    return job;
}

/* Queues job (the queue takes a reference), or finishes it BUSY. */
static void job_queue(resp_store_t *s, resp_store_job_t *job)
{
    pthread_mutex_lock(&s->qlock);
    bool ok = !s->stop && s->q_len < RESP_STORE_QUEUE;
    if (ok) {
        job->refs++;
        s->q[(s->q_head + s->q_len++) % RESP_STORE_QUEUE] = job;
        pthread_cond_signal(&s->qcond);
    }
    pthread_mutex_unlock(&s->qlock);
    if (!ok) {
        pthread_mutex_lock(&job->lock);
        job->done = NULL; /* refused at once: the caller polls */
        pthread_mutex_unlock(&job->lock);
        log_warn("responses store %s: the writer's queue is full (%d): not stored", s->path, RESP_STORE_QUEUE);
        job_finish(job, RESP_STORE_BUSY, "too many stores are waiting for the disk");
    }
}

resp_store_job_t *resp_store_submit(resp_store_t *s, const resp_store_put_t *p, void (*done)(void *ctx),
                                    void *ctx)
{
    resp_store_job_t *job = job_new(s);
    job->id = xstrdup(p->id);
    job->owner = xstrdup(p->owner ? p->owner : RESP_STORE_ANON);
    job->now_s = p->now_s;
    job->response = xstrdup(p->response);
    job->input = xstrdup(p->input ? p->input : "[]");
    job->parent = dup_or_null(p->parent);
    job->context = xstrdup(p->context ? p->context : "[]");
    job->done = done;
    job->done_ctx = ctx;
    job_queue(s, job);
    return job;
}

int resp_store_job_poll(resp_store_job_t *job, char *err, size_t errlen)
{
    pthread_mutex_lock(&job->lock);
    int rc = job->rc;
    if (rc != RESP_STORE_OK && rc != RESP_STORE_PENDING)
        errbuf_set(err, errlen, "%s", job->err);
    pthread_mutex_unlock(&job->lock);
    return rc;
}

void resp_store_job_release(resp_store_job_t **jp)
{
    resp_store_job_t *job = jp ? *jp : NULL;
    if (!job)
        return;
    *jp = NULL;
    pthread_mutex_lock(&job->lock);
    job->done = NULL;
    pthread_mutex_unlock(&job->lock);
    job_unref(job);
}

static int job_wait(resp_store_job_t *job, char *err, size_t errlen)
{
    pthread_mutex_lock(&job->lock);
    while (job->rc == RESP_STORE_PENDING)
        pthread_cond_wait(&job->cond, &job->lock);
    pthread_mutex_unlock(&job->lock);
    int rc = resp_store_job_poll(job, err, errlen);
    job_unref(job);
    return rc;
}

int resp_store_put(resp_store_t *s, const resp_store_put_t *p, char *err, size_t errlen)
{
    return job_wait(resp_store_submit(s, p, NULL, NULL), err, errlen);
}

int resp_store_delete(resp_store_t *s, const char *id, const char *owner)
{
    resp_store_job_t *job = job_new(s);
    job->is_delete = true;
    job->id = xstrdup(id);
    job->owner = xstrdup(owner);
    job->now_s = clock_wall_s();
    job_queue(s, job);
    return job_wait(job, NULL, 0);
}

/* ---- the writer --------------------------------------------------------- */

/* The statements of one write transaction, on wdb. */
typedef struct tx {
    resp_store_t *s;
    sqlite3 *db;
    int64_t cut_s;   /* rows created before this are expired */
    int code;        /* the first failure's code: FULL, BUSY or -1 */
    char *err;
    size_t errlen;
} tx_t;

static bool step_ok(tx_t *t, sqlite3_stmt *st, int want, const char *what)
{
    int rc = st ? sqlite3_step(st) : SQLITE_ERROR;
    if (rc == want || (want == SQLITE_ROW && rc == SQLITE_DONE))
        return true;
    if (t->code == 0) {
        t->code = st ? code_of(sqlite3_extended_errcode(t->db)) : -1;
        fail(t->s, t->db, what, t->err, t->errlen);
    }
    return false;
}

/* Deletes leaf `id`, then each ancestor that is hidden (gone or expired)
 * and continued by nothing else. */
static bool drop_leaf(tx_t *t, const char *leaf)
{
    char *id = xstrdup(leaf);
    bool ok = true;
    for (int hop = 0; id && hop <= RESP_STORE_MAX_DEPTH + 1; hop++) {
        char *parent = NULL;
        sqlite3_stmt *st = prep(t->s, t->db, "SELECT parent FROM responses WHERE id = ?1");
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        if (step_ok(t, st, SQLITE_ROW, "parent") && sqlite3_column_type(st, 0) == SQLITE_TEXT)
            parent = col_dup(st, 0);
        sqlite3_finalize(st);
        st = prep(t->s, t->db, "DELETE FROM responses WHERE id = ?1");
        sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
        ok = step_ok(t, st, SQLITE_DONE, "evict");
        sqlite3_finalize(st);
        free(id);
        id = NULL;
        if (!ok || !parent) {
            free(parent);
            break;
        }
        st = prep(t->s, t->db, "SELECT 1 FROM responses p WHERE p.id = ?1 AND (p.gone = 1 OR p.created_s < ?2)"
                               " AND NOT EXISTS (SELECT 1 FROM responses c WHERE c.parent = p.id)");
        sqlite3_bind_text(st, 1, parent, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, t->cut_s);
        bool dead = st && sqlite3_step(st) == SQLITE_ROW;
        sqlite3_finalize(st);
        if (dead)
            id = parent;
        else
            free(parent);
    }
    free(id);
    return ok;
}

/* Expired or hidden rows that nothing continues, a batch at a time until
 * none is left (a deleted leaf can make its parent one). */
static bool sweep(tx_t *t)
{
    for (int round = 0; round <= RESP_STORE_MAX_DEPTH + 1; round++) {
        sqlite3_stmt *st = prep(t->s, t->db,
                                "DELETE FROM responses WHERE id IN (SELECT p.id FROM responses p"
                                " WHERE (p.created_s < ?1 OR p.gone = 1)"
                                " AND NOT EXISTS (SELECT 1 FROM responses c WHERE c.parent = p.id))");
        sqlite3_bind_int64(st, 1, t->cut_s);
        bool ok = step_ok(t, st, SQLITE_DONE, "expire");
        sqlite3_finalize(st);
        if (!ok)
            return false;
        if (sqlite3_changes(t->db) == 0)
            break;
    }
    return true;
}

/* owner's bytes and rows now. */
static bool owner_usage(tx_t *t, const char *owner, int64_t *bytes, int64_t *n)
{
    *bytes = *n = 0;
    sqlite3_stmt *st = prep(t->s, t->db, "SELECT bytes, n FROM owners WHERE owner = ?1");
    sqlite3_bind_text(st, 1, owner, -1, SQLITE_STATIC);
    bool ok = step_ok(t, st, SQLITE_ROW, "owner usage");
    if (ok && sqlite3_column_type(st, 0) != SQLITE_NULL) {
        *bytes = sqlite3_column_int64(st, 0);
        *n = sqlite3_column_int64(st, 1);
    }
    sqlite3_finalize(st);
    return ok;
}

static bool total_bytes(tx_t *t, int64_t *bytes)
{
    *bytes = 0;
    sqlite3_stmt *st = prep(t->s, t->db, "SELECT bytes FROM totals WHERE k = 0");
    bool ok = step_ok(t, st, SQLITE_ROW, "total");
    if (ok)
        *bytes = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return ok;
}

/* Evicts owner's oldest leaf other than `keep`; *none when there is none. */
static bool evict_one(tx_t *t, const char *owner, const char *keep, bool *none)
{
    sqlite3_stmt *st = prep(t->s, t->db,
                            "SELECT r.id FROM responses r WHERE r.owner = ?1 AND r.id <> ?2"
                            " AND NOT EXISTS (SELECT 1 FROM responses c WHERE c.parent = r.id)"
                            " ORDER BY r.created_s, r.rowid LIMIT 1");
    sqlite3_bind_text(st, 1, owner, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, keep, -1, SQLITE_STATIC);
    char *victim = NULL;
    bool ok = step_ok(t, st, SQLITE_ROW, "oldest leaf");
    if (ok && sqlite3_column_type(st, 0) == SQLITE_TEXT)
        victim = col_dup(st, 0);
    sqlite3_finalize(st);
    *none = ok && !victim;
    if (victim)
        ok = drop_leaf(t, victim);
    free(victim);
    return ok;
}

/* The put's transaction body: 0, TOO_LARGE, FULL, BUSY or -1. */
static int put_tx(tx_t *t, resp_store_job_t *j)
{
    resp_store_t *s = t->s;
    const bool anon = strcmp(j->owner, RESP_STORE_ANON) == 0;
    if (j->now_s - s->last_sweep_s >= SWEEP_EVERY_S) {
        if (!sweep(t))
            return t->code;
        s->last_sweep_s = j->now_s;
    }
    /* a delta on its parent when the parent is there (hidden or expired
     * ones too: their items are kept for this) and the chain is not too
     * deep; else the whole conversation before it */
    const char *prefix = "[]", *parent = NULL;
    int64_t depth = 0;
    if (j->parent) {
        sqlite3_stmt *st = prep(s, t->db, "SELECT depth FROM responses WHERE id = ?1 AND owner = ?2");
        sqlite3_bind_text(st, 1, j->parent, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, j->owner, -1, SQLITE_STATIC);
        if (!step_ok(t, st, SQLITE_ROW, "parent")) {
            sqlite3_finalize(st);
            return t->code;
        }
        bool found = sqlite3_column_type(st, 0) != SQLITE_NULL;
        int64_t pd = found ? sqlite3_column_int64(st, 0) : 0;
        sqlite3_finalize(st);
        if (found && pd + 1 <= RESP_STORE_MAX_DEPTH) {
            parent = j->parent;
            depth = pd + 1;
        } else {
            prefix = j->context;
        }
    }
    const int64_t bytes = (int64_t)(strlen(j->response) + strlen(j->input) + strlen(prefix));
    const int64_t key_cap = anon ? s->max_bytes : s->key_max_bytes;
    if (bytes > key_cap || bytes > s->max_bytes) {
        errbuf_set(t->err, t->errlen, "the response (%lld bytes) exceeds the %s of %lld bytes", (long long)bytes,
                   bytes > s->max_bytes ? "store's cap" : "key's quota",
                   (long long)(bytes > s->max_bytes ? s->max_bytes : key_cap));
        return RESP_STORE_TOO_LARGE;
    }
    sqlite3_stmt *st = prep(s, t->db,
                            "INSERT OR REPLACE INTO responses(id, owner, created_s, response, input, prefix, bytes,"
                            " parent, depth, gone) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0)");
    if (st) {
        sqlite3_bind_text(st, 1, j->id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, j->owner, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, j->now_s);
        sqlite3_bind_text(st, 4, j->response, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 5, j->input, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 6, prefix, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 7, bytes);
        if (parent)
            sqlite3_bind_text(st, 8, parent, -1, SQLITE_STATIC);
        else
            sqlite3_bind_null(st, 8);
        sqlite3_bind_int64(st, 9, depth);
    }
    bool ok = step_ok(t, st, SQLITE_DONE, "insert");
    sqlite3_finalize(st);
    if (!ok)
        return t->code;
    /* the owner's quota: evict its own oldest leaves down to 90 % */
    if (!anon) {
        int64_t ob, on;
        if (!owner_usage(t, j->owner, &ob, &on))
            return t->code;
        if (ob > s->key_max_bytes || on > s->key_max_count) {
            bool none = false;
            while ((ob > s->key_max_bytes - s->key_max_bytes / 10 || on > s->key_max_count) && !none) {
                if (!evict_one(t, j->owner, j->id, &none) || !owner_usage(t, j->owner, &ob, &on))
                    return t->code;
            }
            if (ob > s->key_max_bytes || on > s->key_max_count) {
                errbuf_set(t->err, t->errlen, "the conversation (%lld bytes in %lld responses) exceeds the key's "
                           "quota (%lld bytes, %lld responses)", (long long)ob, (long long)on,
                           (long long)s->key_max_bytes, (long long)s->key_max_count);
                return RESP_STORE_TOO_LARGE;
            }
        }
    }
    /* the global cap: only the writer's own responses are evicted */
    int64_t total;
    if (!total_bytes(t, &total))
        return t->code;
    if (total > s->max_bytes) {
        bool none = false;
        while (total > s->max_bytes - s->max_bytes / 10 && !none)
            if (!evict_one(t, j->owner, j->id, &none) || !total_bytes(t, &total))
                return t->code;
        if (total > s->max_bytes) {
            errbuf_set(t->err, t->errlen, "the store is full (%lld of %lld bytes) with other keys' responses",
                       (long long)total, (long long)s->max_bytes);
            return RESP_STORE_FULL;
        }
    }
    return RESP_STORE_OK;
}

/* A delete: hidden while something continues it, else gone with its
 * hidden ancestors. 0, 1 when there is none, or a failure code. */
static int delete_tx(tx_t *t, resp_store_job_t *j)
{
    sqlite3_stmt *st = prep(t->s, t->db, "SELECT EXISTS (SELECT 1 FROM responses c WHERE c.parent = r.id)"
                                         " FROM responses r WHERE r.id = ?1 AND r.owner = ?2 AND r.gone = 0");
    sqlite3_bind_text(st, 1, j->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, j->owner, -1, SQLITE_STATIC);
    if (!step_ok(t, st, SQLITE_ROW, "delete")) {
        sqlite3_finalize(st);
        return t->code;
    }
    bool found = sqlite3_column_type(st, 0) != SQLITE_NULL;
    bool continued = found && sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (!found)
        return RESP_STORE_NOT_FOUND;
    if (!continued)
        return drop_leaf(t, j->id) ? RESP_STORE_OK : t->code;
    st = prep(t->s, t->db, "UPDATE responses SET gone = 1 WHERE id = ?1");
    sqlite3_bind_text(st, 1, j->id, -1, SQLITE_STATIC);
    bool ok = step_ok(t, st, SQLITE_DONE, "hide");
    sqlite3_finalize(st);
    return ok ? RESP_STORE_OK : t->code;
}

static void run_job(resp_store_t *s, resp_store_job_t *j)
{
    char err[256] = "";
    int64_t left_ms = (j->deadline_us - clock_now_us()) / 1000;
    if (left_ms <= 0) {
        log_warn("responses store %s: %s waited %d ms for the writer: not done", s->path, j->id, s->busy_ms);
        job_finish(j, RESP_STORE_BUSY, "the store stayed busy beyond its wait");
        return;
    }
    if (s->mem)
        pthread_mutex_lock(&s->rlock);
    sqlite3_busy_timeout(s->wdb, (int)left_ms);
    tx_t t = {.s = s, .db = s->wdb, .cut_s = j->now_s - s->max_age_s, .err = err, .errlen = sizeof err};
    int rc;
    int brc = sqlite3_exec(s->wdb, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (brc != SQLITE_OK) {
        rc = code_of(sqlite3_extended_errcode(s->wdb));
        errbuf_set(err, sizeof err, "%s", rc == RESP_STORE_BUSY ? "another process held the store's write lock "
                                                                   "beyond the wait" : sqlite3_errmsg(s->wdb));
        log_warn("responses store %s: BEGIN for %s: %s", s->path, j->id, sqlite3_errmsg(s->wdb));
    } else {
        rc = j->is_delete ? delete_tx(&t, j) : put_tx(&t, j);
        if (rc == RESP_STORE_OK || (j->is_delete && rc == RESP_STORE_NOT_FOUND)) {
            if (sqlite3_exec(s->wdb, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
                int c = code_of(sqlite3_extended_errcode(s->wdb));
                errbuf_set(err, sizeof err, "commit: %s", sqlite3_errmsg(s->wdb));
                log_warn("responses store %s: COMMIT of %s: %s", s->path, j->id, sqlite3_errmsg(s->wdb));
                rc = c;
                sqlite3_exec(s->wdb, "ROLLBACK", NULL, NULL, NULL);
            }
        } else {
            sqlite3_exec(s->wdb, "ROLLBACK", NULL, NULL, NULL);
        }
        if (rc == RESP_STORE_FULL && !err[0])
            errbuf_set(err, sizeof err, "the disk is full");
    }
    if (s->mem)
        pthread_mutex_unlock(&s->rlock);
    if (rc != RESP_STORE_OK && !(j->is_delete && rc == RESP_STORE_NOT_FOUND))
        log_warn("responses store %s: %s %s not done: %s", s->path, j->is_delete ? "delete of" : "response", j->id,
                 err);
    job_finish(j, rc, err);
}

static void *writer_main(void *arg)
{
    resp_store_t *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->qlock);
        while (!s->stop && s->q_len == 0)
            pthread_cond_wait(&s->qcond, &s->qlock);
        if (s->stop) {
            pthread_mutex_unlock(&s->qlock);
            return NULL;
        }
        resp_store_job_t *job = s->q[s->q_head];
        s->q_head = (s->q_head + 1) % RESP_STORE_QUEUE;
        s->q_len--;
        pthread_mutex_unlock(&s->qlock);
        run_job(s, job);
        job_unref(job);
    }
}

/* ---- reads -------------------------------------------------------------- */

int resp_store_get(resp_store_t *s, const char *id, const char *owner, int64_t now_s,
                   resp_store_row_t *row)
{
    memset(row, 0, sizeof *row);
    pthread_mutex_lock(&s->rlock);
    int rc = -1;
    sqlite3_stmt *st = prep(s, s->rdb, "SELECT response, input, created_s FROM responses"
                                       " WHERE id = ?1 AND owner = ?2 AND created_s >= ?3 AND gone = 0");
    if (!st)
        goto out;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, owner, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, now_s - s->max_age_s);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        row->response = col_dup(st, 0);
        row->input = col_dup(st, 1);
        row->created_s = sqlite3_column_int64(st, 2);
        rc = 0;
    } else if (step == SQLITE_DONE) {
        rc = 1;
    } else {
        fail(s, s->rdb, "select", NULL, 0);
    }
    sqlite3_finalize(st);
out:
    pthread_mutex_unlock(&s->rlock);
    return rc;
}

/* Appends the JSON array text `a` (borrowed) to out; false when it is not one. */
static bool extend_text(json_t *out, const char *a)
{
    json_t *j = json_loads(a, 0, NULL);
    bool ok = json_is_array(j);
    if (ok)
        json_array_extend(out, j);
    json_decref(j);
    return ok;
}

int resp_store_context(resp_store_t *s, const char *id, const char *owner, int64_t now_s, json_t **context)
{
    *context = NULL;
    /* leaf first: (prefix, input, response) of each link */
    size_t n = 0, cap = 8;
    char *(*links)[3] = xmalloc(cap * sizeof *links);
    int rc = 0;
    pthread_mutex_lock(&s->rlock);
    sqlite3_stmt *st = prep(s, s->rdb, "SELECT prefix, input, response, parent, created_s, gone FROM responses"
                                       " WHERE id = ?1 AND owner = ?2");
    char *cur = xstrdup(id);
    while (st && cur) {
        if (n > RESP_STORE_MAX_DEPTH) {
            log_error("responses store %s: the chain of %s is deeper than %d", s->path, id, RESP_STORE_MAX_DEPTH);
            rc = -1;
            break;
        }
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, cur, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, owner, -1, SQLITE_STATIC);
        int step = sqlite3_step(st);
        if (step != SQLITE_ROW) {
            if (step == SQLITE_DONE && n == 0) {
                rc = 1;
            } else {
                if (step == SQLITE_DONE)
                    log_error("responses store %s: %s continues %s, which is not there", s->path, id, cur);
                else
                    fail(s, s->rdb, "chain", NULL, 0);
                rc = -1;
            }
            break;
        }
        /* the response asked for must be visible; its ancestors are kept for it */
        if (n == 0 && (sqlite3_column_int(st, 5) != 0 || sqlite3_column_int64(st, 4) < now_s - s->max_age_s)) {
            rc = 1;
            break;
        }
        if (n == cap)
            links = xrealloc(links, (cap *= 2) * sizeof *links);
        links[n][0] = col_dup(st, 0);
        links[n][1] = col_dup(st, 1);
        links[n][2] = col_dup(st, 2);
        n++;
        free(cur);
        cur = sqlite3_column_type(st, 3) == SQLITE_TEXT ? col_dup(st, 3) : NULL;
    }
    free(cur);
    if (!st)
        rc = -1;
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->rlock);
    json_t *ctx = rc == 0 ? json_array() : NULL;
    for (size_t i = n; i-- > 0;) {
        if (ctx) {
            json_t *resp = json_loads(links[i][2], 0, NULL);
            json_t *out = output_of(resp);
            if (!extend_text(ctx, links[i][0]) || !extend_text(ctx, links[i][1]) || !out) {
                log_error("responses store %s: a link of %s's chain is not valid JSON", s->path, id);
                json_decref(ctx);
                ctx = NULL;
                rc = -1;
            } else {
                json_array_extend(ctx, out);
            }
            json_decref(resp);
        }
        free(links[i][0]);
        free(links[i][1]);
        free(links[i][2]);
    }
    free(links);
    *context = ctx;
    return rc;
}

int resp_store_stats(resp_store_t *s, int64_t *n_rows, int64_t *n_bytes)
{
    pthread_mutex_lock(&s->rlock);
    int rc = -1;
    sqlite3_stmt *st = prep(s, s->rdb, "SELECT (SELECT COUNT(*) FROM responses), (SELECT bytes FROM totals WHERE k = 0)");
    if (st && sqlite3_step(st) == SQLITE_ROW) {
        *n_rows = sqlite3_column_int64(st, 0);
        *n_bytes = sqlite3_column_int64(st, 1);
        rc = 0;
    } else if (st) {
        fail(s, s->rdb, "stats", NULL, 0);
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->rlock);
    return rc;
}

int resp_store_owner_stats(resp_store_t *s, const char *owner, int64_t *n_rows, int64_t *n_bytes)
{
    pthread_mutex_lock(&s->rlock);
    int rc = -1;
    *n_rows = *n_bytes = 0;
    sqlite3_stmt *st = prep(s, s->rdb, "SELECT n, bytes FROM owners WHERE owner = ?1");
    if (st) {
        sqlite3_bind_text(st, 1, owner, -1, SQLITE_STATIC);
        int step = sqlite3_step(st);
        if (step == SQLITE_ROW) {
            *n_rows = sqlite3_column_int64(st, 0);
            *n_bytes = sqlite3_column_int64(st, 1);
        }
        rc = step == SQLITE_ROW || step == SQLITE_DONE ? 0 : fail(s, s->rdb, "owner stats", NULL, 0);
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->rlock);
    return rc;
}

void resp_store_row_free(resp_store_row_t *row)
{
    if (!row)
        return;
    free(row->response);
    free(row->input);
    memset(row, 0, sizeof *row);
}
