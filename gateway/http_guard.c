/* http_guard.c — what a request's headers decide before its body is read
 * (http.h "What the headers decide"): the path's bytes, the Host check,
 * browser origins, the API key and its rate limit, the body's size and
 * Content-Type; and the CORS preflight answer. http_admit runs them in
 * order on libmicrohttpd's first call of a request. */
#include "gateway/http_guard.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/clock.h"
#include "common/errbuf.h"
#include "common/log.h"
#include "common/vec.h"
#include "common/xalloc.h"
#include "gateway/http_respond.h"
#include "gateway/partition.h"
#include "gateway/ui.h"

/* ---- API keys ---------------------------------------------------------- */

int http_server_reload_keys(http_server_t *s, char *err, size_t err_len)
{
    char buf[512];
    if (!s->keys_path) {
        snprintf(buf, sizeof buf, "no keys file: the gateway runs without API keys");
        goto fail;
    }
    keys_t *k = NULL;
    if (keys_load(s->keys_path, &k, buf, sizeof buf) < 0)
        goto fail;
    pthread_rwlock_wrlock(&s->keys_lock);
    keys_t *old = s->keys;
    s->keys = k;
    pthread_rwlock_unlock(&s->keys_lock);
    keys_free(&old); /* lookups copy what they need under the read lock */
    log_info("loaded %zu API keys from %s", keys_count(k), s->keys_path);
    return 0;
fail:
    log_error("keys not (re)loaded: %s", buf);
    errbuf_set(err, err_len, "%s", buf);
    return -1;
}

/* Takes one request from key `name`'s bucket. Returns 0, or the whole
 * seconds until a token is back (>= 1) when the bucket is empty. */
static int rate_take(http_server_t *s, const char *name)
{
    double burst = s->rate_per_key > 1 ? s->rate_per_key : 1;
    int64_t now = clock_now_us();
    pthread_mutex_lock(&s->rate_lock);
    struct rate_bucket *b = NULL;
    for (size_t i = 0; i < s->n_buckets && !b; i++)
        if (strcmp(s->buckets[i].name, name) == 0)
            b = &s->buckets[i];
    if (!b) {
        vec_reserve(s->buckets, s->cap_buckets, s->n_buckets + 1);
        b = &s->buckets[s->n_buckets++];
        snprintf(b->name, sizeof b->name, "%s", name);
        b->tokens = burst;
        b->t_us = now;
    }
    b->tokens += (double)(now - b->t_us) / 1e6 * s->rate_per_key;
    if (b->tokens > burst)
        b->tokens = burst;
    b->t_us = now;
    int wait = 0;
    if (b->tokens >= 1) {
        b->tokens -= 1;
    } else {
        double secs = (1 - b->tokens) / s->rate_per_key;
        wait = (int)secs + 1;
    }
    pthread_mutex_unlock(&s->rate_lock);
    return wait;
}

/* The key a request carries: "Authorization: Bearer KEY" (OpenAI), or
 * "x-api-key: KEY" (Anthropic's SDKs); NULL when none. */
static const char *request_key(struct MHD_Connection *c)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *tok = NULL;
    if (h && strncasecmp(h, "Bearer ", 7) == 0)
        tok = h + 7;
    else if (!h)
        tok = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    while (tok && *tok == ' ')
        tok++;
    return tok;
}

/* With keys on: does the request carry a key that may read /metrics (admin
 * or metrics)? Routes open to anyone (/health) show their counters only then. */
bool http_may_read_metrics(http_server_t *s, struct MHD_Connection *c)
{
    const char *tok = request_key(c);
    if (!tok)
        return false;
    pthread_rwlock_rdlock(&s->keys_lock);
    const keys_entry_t *k = keys_lookup(s->keys, tok);
    bool may = k && k->metrics;
    pthread_rwlock_unlock(&s->keys_lock);
    return may;
}

/* Checks the bearer key for a route. Returns 0 (tier set in q), or -1 with
 * *e filled (401/403, or 429 when the key is over its rate limit). */
static int authorize(http_server_t *s, struct MHD_Connection *c, const route_t *rt, http_req_t *q,
                     oai_error_t *e)
{
    q->tier = PRIO_TIER_NORMAL;
    q->partition = PARTITION_PUBLIC;
    snprintf(q->owner, sizeof q->owner, "%s", RESP_STORE_ANON);
    if (rt->auth == AUTH_NONE || (rt->auth == AUTH_METRICS && !s->keys_path))
        return 0;
    if (!s->keys_path) {
        if (rt->auth == AUTH_ADMIN) {
            oai_error_set(e, 403, NULL, "Admin endpoints need a keys file with an admin key "
                                        "(pagoda-gateway --keys FILE)");
            return -1;
        }
        if (rt->auth == AUTH_OPS && !s->admin_open) {
            oai_error_set(e, 403, NULL, "Operations endpoints need a keys file with an admin key "
                                        "(pagoda-gateway --keys FILE), or --admin-open to serve "
                                        "them without keys");
            return -1;
        }
        return 0; /* AUTH_OPS with --admin-open: open gateway */
    }
    /* the key, on every route */
    const char *tok = request_key(c);
    if (!tok) {
        oai_error_set(e, 401, NULL, "You didn't provide an API key. Send it as "
                                    "'Authorization: Bearer YOUR_KEY' (or 'x-api-key: YOUR_KEY').");
        return -1;
    }
    bool found = false, admin = false, metrics = false;
    char name[KEYS_NAME_MAX + 1] = "";
    pthread_rwlock_rdlock(&s->keys_lock);
    const keys_entry_t *k = keys_lookup(s->keys, tok);
    if (k) {
        found = true;
        q->keyed = true;
        admin = k->admin;
        metrics = k->metrics;
        q->tier = k->tier;
        q->partition = k->partition;
        snprintf(name, sizeof name, "%s", k->name);
        for (int i = 0; i < 32; i++)
            snprintf(q->owner + 2 * i, 3, "%02x", k->sha256[i]);
    }
    pthread_rwlock_unlock(&s->keys_lock);
    if (!found) {
        oai_error_set(e, 401, NULL, "Incorrect API key provided.");
        return -1;
    }
    if ((rt->auth == AUTH_ADMIN || rt->auth == AUTH_OPS) && !admin) {
        oai_error_set(e, 403, NULL, "This key may not use admin endpoints");
        return -1;
    }
    if (rt->auth == AUTH_METRICS && !metrics) {
        oai_error_set(e, 403, NULL, "This key may not read /metrics (keys-file flag 'metrics' or 'admin')");
        return -1;
    }
    int wait;
    if (rt->auth == AUTH_KEY && s->rate_per_key > 0 && (wait = rate_take(s, name)) > 0) {
        oai_error_set(e, 429, NULL,
                      "Rate limit reached for key '%s': %g requests per second. "
                      "Try again in %d s.", name, s->rate_per_key, wait);
        return -1;
    }
    return 0;
}

/* ---- Content-Type and the CORS preflight -------------------------------- */

/* 1 when the Content-Type header says JSON: media type application/json
 * (any case, blanks around it), parameters allowed but a charset only if it
 * is UTF-8 (RFC 8259: JSON between systems is UTF-8). 0 otherwise, also
 * when the header is missing. */
static int content_type_is_json(const char *ct)
{
    if (!ct)
        return 0;
    ct += strspn(ct, " \t");
    static const char want[] = "application/json";
    if (strncasecmp(ct, want, sizeof want - 1) != 0)
        return 0;
    const char *p = ct + sizeof want - 1;
    p += strspn(p, " \t");
    if (*p == '\0')
        return 1;
    if (*p != ';')
        return 0; /* application/jsonx, application/json-seq, ... */
    /* parameters: only charset is looked at */
    while (*p == ';') {
        p++;
        p += strspn(p, " \t");
        size_t n = strcspn(p, ";");
        if (n >= 8 && strncasecmp(p, "charset=", 8) == 0) {
            const char *v = p + 8;
            size_t vn = n - 8;
            while (vn && (v[vn - 1] == ' ' || v[vn - 1] == '\t'))
                vn--;
            if (vn >= 2 && v[0] == '"' && v[vn - 1] == '"') {
                v++;
                vn -= 2;
            }
            if (!((vn == 5 && strncasecmp(v, "utf-8", 5) == 0) ||
                  (vn == 4 && strncasecmp(v, "utf8", 4) == 0)))
                return 0;
        }
        p += n;
    }
    return 1;
}

/* Header values echoed in a preflight answer must be header-safe: token
 * characters, commas and blanks, bounded. */
static bool header_list_ok(const char *v)
{
    size_t n = strlen(v);
    if (n == 0 || n > 1024)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)v[i];
        if (!(isalnum(ch) || strchr("!#$%&'*+-.^_`|~, \t", ch)))
            return false;
    }
    return true;
}

/* A CORS preflight from an allowed origin: 204 and what the page may send.
 * `allow` = the methods of the path. */
enum MHD_Result http_respond_preflight(http_server_t *s, struct MHD_Connection *c,
                                         const char *allow)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    char methods[160];
    snprintf(methods, sizeof methods, "%s, OPTIONS", allow);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", methods);
    const char *rh = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 "Access-Control-Request-Headers");
    MHD_add_response_header(r, "Access-Control-Allow-Headers",
                            rh && header_list_ok(rh) ? rh : "authorization, content-type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, methods);
    return http_queue(s, c, 204, r);
}

/* ---- the Host check ------------------------------------------------------ */

/* An IP literal: dotted IPv4, or IPv6 (without brackets). */
static bool is_ip_literal(const char *h, size_t n)
{
    char buf[INET6_ADDRSTRLEN + 1];
    unsigned char a[16];
    if (n == 0 || n >= sizeof buf)
        return false;
    memcpy(buf, h, n);
    buf[n] = '\0';
    return inet_pton(AF_INET, buf, a) == 1 || inet_pton(AF_INET6, buf, a) == 1;
}

/* name (n bytes, no trailing dot) against one allowed_hosts entry. */
static bool host_entry_matches(const char *name, size_t n, const char *ent, size_t en)
{
    if (en && ent[en - 1] == '.')
        en--;
    if (en == 1 && ent[0] == '*')
        return true;
    if (en > 2 && ent[0] == '*' && ent[1] == '.') /* "*.SUFFIX": NAME.SUFFIX, not SUFFIX itself */
        return n > en - 1 && strncasecmp(name + n - (en - 1), ent + 1, en - 1) == 0;
    return n == en && strncasecmp(name, ent, n) == 0;
}

bool http_host_allowed(const char *host, const char *listen_host, const char *allowed)
{
    if (!host)
        return true;
    const char *name = host;
    size_t n;
    if (host[0] == '[') { /* [IPv6]:PORT: a literal or nothing */
        const char *close = strchr(host, ']');
        if (!close || (close[1] && close[1] != ':'))
            return false;
        return is_ip_literal(host + 1, (size_t)(close - host - 1));
    }
    const char *colon = strchr(host, ':');
    n = colon ? (size_t)(colon - host) : strlen(host);
    if (colon && (!colon[1] || strspn(colon + 1, "0123456789") != strlen(colon + 1)))
        return false; /* a port that is not a number (or a second colon) */
    if (n && name[n - 1] == '.')
        n--; /* "localhost." is localhost */
    if (n == 0)
        return false;
    if (is_ip_literal(name, n) || (n == 9 && strncasecmp(name, "localhost", 9) == 0))
        return true;
    if (listen_host && !is_ip_literal(listen_host, strlen(listen_host)) &&
        host_entry_matches(name, n, listen_host, strlen(listen_host)))
        return true;
    for (const char *p = allowed ? allowed : ""; *p;) {
        p += strspn(p, ", \t");
        size_t len = strcspn(p, ", \t");
        if (len && host_entry_matches(name, n, p, len))
            return true;
        p += len;
    }
    return false;
}

/* ---- admission ---------------------------------------------------------- */


/* Content-Length as declared (0 when absent); *chunked when the body comes
 * in chunks of unknown total. libmicrohttpd has refused malformed values. */
uint64_t http_declared_body(struct MHD_Connection *c, bool *chunked)
{
    const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    *chunked = te && strcasestr(te, "chunked") != NULL;
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    return cl ? strtoull(cl, NULL, 10) : 0;
}

/* Refuses with `status` in the route's shape: *e is q->refusal. */
oai_error_t *http_refuse(http_req_t *q, const route_t *rt)
{
    q->refused = true;
    q->err_surface = rt ? rt->surface : NULL;
    return &q->refusal;
}

/* Everything the headers decide (http.h), in order. Returns 0 with q->route
 * set (or q->preflight), or -1 with q->refused and q->refusal set. */
int http_admit(http_server_t *s, struct MHD_Connection *c, const char *url, const char *method,
               const route_t *rt, bool path_known, http_req_t *q)
{
    oai_error_t *e;
    /* the path as sent: a control byte would be cut out of (or cut) the
     * decoded one the routes see */
    if (q->path_ctl) {
        e = http_refuse(q, rt);
        oai_error_set(e, 400, NULL, "The request path contains a control character (%%00-%%1F or "
                                    "%%7F, percent-encoded or not); no path of this API has one.");
        e->code = "invalid_path";
        return -1;
    }
    if (q->path_long) {
        e = http_refuse(q, rt);
        oai_error_set(e, 414, NULL, "The request target is longer than %d bytes.", HTTP_MAX_URL);
        e->type = "invalid_request_error";
        e->code = "uri_too_long";
        return -1;
    }
    /* a Host that is not this server's: a DNS rebinding page (its name now
     * resolves to us, so the browser calls it same-origin) */
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (!http_host_allowed(host, s->listen_host, s->allowed_hosts)) {
        e = http_refuse(q, rt);
        oai_error_set(e, 421, NULL, "Host '%.200s' is not a name of this server: allow it with "
                                    "--allowed-host NAME (config allowed_hosts), or call it by IP "
                                    "address or localhost.", host);
        e->type = "invalid_request_error";
        e->code = "host_not_allowed";
        log_debug("refused %s %.200s for Host '%.200s'", method, url, host);
        return -1;
    }
    /* browsers: a web page of a foreign origin gets nothing at all, on any
     * route (http.h "Browser safety") */
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin && !http_origin_allowed(s, origin) && !(s->ui && ui_origin_is_self(origin, host))) {
        e = http_refuse(q, rt);
        oai_error_set(e, 403, NULL, "Requests from web pages of origin '%.200s' are not allowed "
                                    "(the gateway allows %s; see --cors-origin)", origin,
                      s->n_cors ? "other origins" : "no browser origin");
        e->code = "origin_not_allowed";
        log_debug("refused %s %.200s from origin '%.200s'", method, url, origin);
        return -1;
    }
    if (!rt && path_known && origin && strcmp(method, MHD_HTTP_METHOD_OPTIONS) == 0) {
        q->preflight = true;
        return 0;
    }
    if (!rt && path_known) {
        e = http_refuse(q, NULL);
        oai_error_set(e, 405, NULL, "Method %.40s is not allowed on %.300s (allowed: %s)", method, url,
                      q->allow);
        return -1;
    }
    if (!rt) {
        /* as OpenAI answers an unknown URL: invalid_request_error, not not_found_error */
        e = http_refuse(q, NULL);
        oai_error_set(e, 404, NULL, "Invalid URL (%.100s %.300s)", method, url);
        e->type = "invalid_request_error";
        e->code = "not_found";
        return -1;
    }
    /* refusals of a surface's route come in its API's shape */
    e = &q->refusal;
    if (authorize(s, c, rt, q, e) < 0) {
        http_refuse(q, rt);
        return -1;
    }
    /* the body: what the route takes, before a byte of it is read */
    bool chunked;
    uint64_t len = http_declared_body(c, &chunked);
    /* a small body from a key, or on an operations route the operator opened
     * (--admin-open: run-time LoRA loads take one) */
    size_t limit = rt->surface ? s->max_body : q->keyed || rt->auth == AUTH_OPS ? HTTP_SMALL_BODY : 0;
    if (len > limit || (chunked && limit == 0)) {
        e = http_refuse(q, rt);
        if (limit == 0)
            oai_error_set(e, 413, NULL, "%.10s %.300s takes no request body", method, url);
        else
            oai_error_set(e, 413, NULL, "Request body exceeds %zu bytes", limit);
        return -1;
    }
    /* a body must say it is JSON: a page may POST text/plain (or a Blob
     * without a type) cross-origin without a preflight */
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if ((len || chunked) && !content_type_is_json(ct)) {
        e = http_refuse(q, rt);
        oai_error_set(e, 415, NULL, "Unsupported Content-Type '%.100s': request bodies "
                                    "must be JSON (Content-Type: application/json)",
                      ct ? ct : "(none)");
        e->type = "invalid_request_error";
        e->code = "unsupported_media_type";
        return -1;
    }
    q->route = rt;
    return 0;
}

