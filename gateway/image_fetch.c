/* image_fetch.c — remote image URLs from an operator's allow list, fetched
 * with libcurl on threads of their own (image_fetch.h says what is refused
 * and why). */
#include "gateway/image_fetch.h"

#include <arpa/inet.h>
#include <assert.h>
#include <ctype.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"

#define URL_MAX 4096

/* ---- the allow list ------------------------------------------------------ */

typedef struct {
    char host[256];   /* lower-case, no trailing dot; an IP literal in inet_ntop's form; for a
                         suffix entry the part after "*." */
    uint16_t port;    /* 0 = any */
    bool suffix;      /* "*.SUFFIX" */
    bool literal;     /* an IPv4 or IPv6 address */
} allow_entry_t;

struct image_url_allow {
    allow_entry_t *e;
    size_t n;
};

/* An IP literal (v6 without brackets) in canonical form into out[cap];
 * false when s is not one. */
static bool ip_canon(const char *s, char *out, size_t cap)
{
    unsigned char a[16];
    if (inet_pton(AF_INET, s, a) == 1)
        return inet_ntop(AF_INET, a, out, (socklen_t)cap) != NULL;
    if (inet_pton(AF_INET6, s, a) == 1)
        return inet_ntop(AF_INET6, a, out, (socklen_t)cap) != NULL;
    return false;
}

/* A DNS name: letters, digits, '-', '_', '.'; lower-cased in place, one
 * trailing dot dropped. */
static bool name_canon(char *h)
{
    size_t n = strlen(h);
    if (n && h[n - 1] == '.')
        h[--n] = '\0';
    if (!n || h[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)h[i];
        if (!(isalnum(c) || c == '-' || c == '_' || c == '.') || (c == '.' && h[i + 1] == '.'))
            return false;
        h[i] = (char)tolower(c);
    }
    return true;
}

static int parse_entry(const char *s, size_t len, allow_entry_t *out, char *why, size_t n)
{
    char tok[300];
    if (len >= sizeof tok) {
        snprintf(why, n, "allow-list entry '%.40s...' is too long", s);
        return -1;
    }
    memcpy(tok, s, len);
    tok[len] = '\0';
    memset(out, 0, sizeof *out);
    char *host = tok, *port = NULL;
    if (tok[0] == '[') {
        char *close = strchr(tok, ']');
        if (!close || (close[1] && close[1] != ':'))
            goto bad;
        *close = '\0';
        host = tok + 1;
        port = close[1] == ':' ? close + 2 : NULL;
        if (!ip_canon(host, out->host, sizeof out->host) || !strchr(host, ':'))
            goto bad;
        out->literal = true;
    } else {
        char *colon = strchr(tok, ':');
        if (colon) {
            if (strchr(colon + 1, ':'))
                goto bad; /* an IPv6 literal needs brackets */
            *colon = '\0';
            port = colon + 1;
        }
        if (strncmp(host, "*.", 2) == 0) {
            out->suffix = true;
            host += 2;
        }
        if (!out->suffix && ip_canon(host, out->host, sizeof out->host)) {
            out->literal = true;
        } else {
            if (strlen(host) >= sizeof out->host || !name_canon(host))
                goto bad;
            strcpy(out->host, host);
        }
    }
    if (port) {
        char *end;
        long p = *port ? strtol(port, &end, 10) : -1;
        if (p < 1 || p > 65535 || *end || !isdigit((unsigned char)*port))
            goto bad;
        out->port = (uint16_t)p;
    }
    return 0;
bad:
    snprintf(why, n, "allow-list entry '%.*s' is not HOST, HOST:PORT, [IPV6]:PORT or *.SUFFIX[:PORT]",
             (int)len, s);
    return -1;
}

image_url_allow_t *image_url_allow_parse(const char *list, char *why, size_t n)
{
    image_url_allow_t *a = xcalloc(1, sizeof *a);
    for (const char *p = list ? list : ""; *p;) {
        p += strspn(p, ", \t");
        size_t len = strcspn(p, ", \t");
        if (!len)
            break;
        if (a->n == IMAGE_FETCH_MAX_ENTRIES) {
            snprintf(why, n, "more than %d allow-list entries", IMAGE_FETCH_MAX_ENTRIES);
            goto err;
        }
        a->e = xrealloc(a->e, (a->n + 1) * sizeof *a->e);
        if (parse_entry(p, len, &a->e[a->n], why, n) < 0)
            goto err;
        a->n++;
        p += len;
    }
    return a;
err:
    image_url_allow_free(&a);
    return NULL;
}

void image_url_allow_free(image_url_allow_t **ap)
{
    image_url_allow_t *a = *ap;
    if (!a)
        return;
    *ap = NULL;
    free(a->e);
    free(a);
}

size_t image_url_allow_count(const image_url_allow_t *a)
{
    return a ? a->n : 0;
}

/* The entry host h (canonical) and port p match, or NULL. */
static const allow_entry_t *allow_find(const image_url_allow_t *a, const char *h, bool literal, uint16_t p)
{
    size_t hn = strlen(h);
    for (size_t i = 0; a && i < a->n; i++) {
        const allow_entry_t *e = &a->e[i];
        if (e->port && e->port != p)
            continue;
        if (e->literal != literal)
            continue;
        if (e->suffix) {
            size_t sn = strlen(e->host);
            if (hn > sn + 1 && h[hn - sn - 1] == '.' && strcmp(h + hn - sn, e->host) == 0)
                return e;
        } else if (strcmp(h, e->host) == 0) {
            return e;
        }
    }
    return NULL;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* One part of a parsed URL, or NULL when absent (curl's copy: curl_free). */
static char *url_part(CURLU *u, CURLUPart what)
{
    char *s = NULL;
    if (curl_url_get(u, what, &s, 0) != CURLUE_OK)
        return NULL;
    return s;
}

image_url_status_t image_url_check(const image_url_allow_t *a, const char *url, size_t len, image_url_t *out,
                                   char *why, size_t n)
{
    pthread_once(&curl_once, curl_init_once);
    memset(out, 0, sizeof *out);
    /* the scheme first, by its own text: a refusal names it even where
     * libcurl (built without it) would call the URL unparseable */
    size_t sl = 0;
    while (sl < len && sl < 16 && (isalnum((unsigned char)url[sl]) || url[sl] == '+' || url[sl] == '-' ||
                                    url[sl] == '.'))
        sl++;
    if (sl == 0 || sl >= len || url[sl] != ':') {
        snprintf(why, n, "is not an absolute URL");
        return IMAGE_URL_E_SYNTAX;
    }
    if (!((sl == 4 && strncasecmp(url, "http", 4) == 0) || (sl == 5 && strncasecmp(url, "https", 5) == 0))) {
        snprintf(why, n, "the URL scheme '%.*s:' is not accepted (http:, https: or data:)", (int)sl, url);
        return IMAGE_URL_E_SCHEME;
    }
    if (len > URL_MAX || memchr(url, '\0', len)) {
        snprintf(why, n, "the URL is longer than %d bytes or holds a NUL byte", URL_MAX);
        return IMAGE_URL_E_SYNTAX;
    }
    /* '%' anywhere before the path (percent-encoding a host, an IPv6 zone):
     * libcurl would decode it, a reader of the log would not; refused */
    size_t auth = sl + 1;
    while (auth < len && url[auth] == '/')
        auth++;
    size_t auth_end = auth;
    while (auth_end < len && !strchr("/?#\\", url[auth_end]))
        auth_end++;
    if (memchr(url + auth, '%', auth_end - auth)) {
        snprintf(why, n, "the URL's host is not a plain host name or address (no %%-encoding)");
        return IMAGE_URL_E_HOST;
    }
    char *z = xstrndup(url, len);
    CURLU *u = curl_url();
    if (!u) {
        log_error("%s:%d: out of memory", __FILE__, __LINE__);
        abort();
    }
    image_url_status_t st = IMAGE_URL_OK;
    char *scheme = NULL, *user = NULL, *pass = NULL, *host = NULL, *port = NULL, *zone = NULL;
    if (curl_url_set(u, CURLUPART_URL, z, 0) != CURLUE_OK) {
        snprintf(why, n, "is not a URL this server can parse");
        st = IMAGE_URL_E_SYNTAX;
        goto done;
    }
    scheme = url_part(u, CURLUPART_SCHEME);
    user = url_part(u, CURLUPART_USER);
    pass = url_part(u, CURLUPART_PASSWORD);
    host = url_part(u, CURLUPART_HOST);
    port = url_part(u, CURLUPART_PORT);
    zone = url_part(u, CURLUPART_ZONEID);
    if (!scheme || (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)) {
        snprintf(why, n, "the URL scheme is not accepted (http:, https: or data:)");
        st = IMAGE_URL_E_SCHEME;
        goto done;
    }
    out->https = strcmp(scheme, "https") == 0;
    if (user || pass) {
        snprintf(why, n, "a URL with a user name or password is not fetched");
        st = IMAGE_URL_E_USERINFO;
        goto done;
    }
    if (!host || zone || strchr(host, '%') || strlen(host) >= sizeof out->host) {
        snprintf(why, n, "the URL's host is not a plain host name or address");
        st = IMAGE_URL_E_HOST;
        goto done;
    }
    char h[256];
    size_t hl = strlen(host);
    if (host[0] == '[') { /* an IPv6 literal */
        if (hl < 3 || host[hl - 1] != ']')
            goto bad_host;
        memcpy(h, host + 1, hl - 2);
        h[hl - 2] = '\0';
        if (!strchr(h, ':') || !ip_canon(h, out->host, sizeof out->host))
            goto bad_host;
        out->literal = true;
    } else if (ip_canon(host, out->host, sizeof out->host)) {
        out->literal = true;
    } else {
        strcpy(h, host);
        if (!name_canon(h))
            goto bad_host;
        strcpy(out->host, h);
    }
    long p = port ? strtol(port, NULL, 10) : (out->https ? 443 : 80);
    if (p < 1 || p > 65535)
        goto bad_host;
    out->port = (uint16_t)p;
    if (image_url_allow_count(a) == 0) {
        snprintf(why, n, "remote image URLs are not fetched: they are disabled on this server; the operator "
                         "can allow hosts with --image-url-allow (images.url_allow)");
        st = IMAGE_URL_E_DISABLED;
        goto done;
    }
    const allow_entry_t *e = allow_find(a, out->host, out->literal, out->port);
    if (!e) {
        snprintf(why, n, "host '%s' port %u is not on the server's image URL allow list (--image-url-allow)",
                 out->host, out->port);
        st = IMAGE_URL_E_DENIED;
        goto done;
    }
    goto done;
bad_host:
    snprintf(why, n, "the URL's host is not a plain host name or address");
    st = IMAGE_URL_E_HOST;
done:
    curl_free(scheme);
    curl_free(user);
    curl_free(pass);
    curl_free(host);
    curl_free(port);
    curl_free(zone);
    curl_url_cleanup(u);
    free(z);
    return st;
}

/* ---- addresses ----------------------------------------------------------- */

static bool v4_internal(const uint8_t *a)
{
    return a[0] == 0 ||                                   /* 0.0.0.0/8 "this network" */
           a[0] == 10 ||                                  /* 10/8 private */
           a[0] == 127 ||                                 /* loopback */
           (a[0] == 100 && (a[1] & 0xc0) == 64) ||        /* 100.64/10 carrier-grade NAT */
           (a[0] == 169 && a[1] == 254) ||                /* link-local (cloud metadata) */
           (a[0] == 172 && (a[1] & 0xf0) == 16) ||        /* 172.16/12 private */
           (a[0] == 192 && a[1] == 0 && a[2] == 0) ||     /* 192.0.0/24 protocol assignments */
           (a[0] == 192 && a[1] == 168) ||                /* 192.168/16 private */
           (a[0] == 198 && (a[1] & 0xfe) == 18) ||        /* 198.18/15 benchmarking */
           a[0] >= 224;                                   /* multicast, reserved, broadcast */
}

bool image_url_addr_internal(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return v4_internal((const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr);
    if (sa->sa_family != AF_INET6)
        return true;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    const uint8_t *b = a->s6_addr;
    if (IN6_IS_ADDR_V4MAPPED(a) || IN6_IS_ADDR_V4COMPAT(a))
        return v4_internal(b + 12);
    if (b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b) /* 64:ff9b::/96 NAT64 */
        return v4_internal(b + 12);
    return IN6_IS_ADDR_UNSPECIFIED(a) || IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_LINKLOCAL(a) ||
           IN6_IS_ADDR_SITELOCAL(a) || IN6_IS_ADDR_MULTICAST(a) || (b[0] & 0xfe) == 0xfc; /* fc00::/7 */
}

/* ---- the fetcher --------------------------------------------------------- */

struct image_fetch_job {
    pthread_mutex_t lock;
    int refs;                   /* [lock] the owner's and the fetcher's */
    bool done, parked;          /* [lock] */
    void (*wake)(void *ctx);    /* [lock] NULL once the owner released */
    void *ctx;
    size_t n;
    char **urls;                /* (n) */
    uint8_t **body;             /* (n) result: the bytes, or NULL and why[i] */
    size_t *len;
    char **why;
    struct image_fetch_job *next; /* [f->lock] in the queue */
};

typedef enum { R_OK, R_REFUSED, R_TIMEOUT, R_TOO_LARGE, R_STATUS, R_CONNECT, R_ERROR, R_N } result_t;
static const char *const result_names[R_N] = {"ok", "refused", "timeout", "too_large", "http_status", "connect",
                                              "error"};

struct image_fetch {
    image_url_allow_t *allow;
    int64_t timeout_ms;
    size_t max_bytes;
    pthread_mutex_t lock;
    pthread_cond_t cond;        /* a job queued, or stopping */
    image_fetch_job_t *head, *tail; /* [lock] the queue */
    size_t n_queued;            /* [lock] */
    atomic_bool stopping;
    pthread_t *threads;
    unsigned n_threads;
    metrics_family_t *m_fetches, *m_bytes; /* NULL without a registry */
};

const image_url_allow_t *image_fetch_allow(const image_fetch_t *f)
{
    return f ? f->allow : NULL;
}

void image_fetch_note_refused(image_fetch_t *f)
{
    if (f && f->m_fetches)
        metrics_counter_add(f->m_fetches, (const char *[]){result_names[R_REFUSED]}, 1);
}

/* One transfer's state for libcurl's callbacks. */
typedef struct {
    image_fetch_t *f;
    bool literal;               /* the URL's entry names its address literally */
    bool internal;              /* the socket hook refused an internal address */
    bool too_large;
    uint8_t *buf;
    size_t len, cap;
} xfer_t;

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    xfer_t *x = ud;
    size_t n = size * nmemb;
    if (x->len + n > x->f->max_bytes) {
        x->too_large = true;
        return 0; /* CURLE_WRITE_ERROR */
    }
    if (x->len + n > x->cap) {
        size_t cap = x->cap ? x->cap : 65536;
        while (cap < x->len + n)
            cap *= 2;
        x->buf = xrealloc(x->buf, cap);
        x->cap = cap;
    }
    memcpy(x->buf + x->len, p, n);
    x->len += n;
    return n;
}

/* Every address libcurl connects to passes here: the DNS rebinding check. */
static curl_socket_t on_open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
    xfer_t *x = ud;
    if (purpose != CURLSOCKTYPE_IPCXN || (!x->literal && image_url_addr_internal(&a->addr))) {
        x->internal = true;
        return CURL_SOCKET_BAD;
    }
    return socket(a->family, a->socktype, a->protocol);
}

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    xfer_t *x = ud;
    return atomic_load(&x->f->stopping) ? 1 : 0;
}

/* One URL, with its redirects: the body, or NULL with why[n] and *res. */
static uint8_t *fetch_one(image_fetch_t *f, const char *url0, size_t *len, char *why, size_t n, result_t *res)
{
    int64_t deadline = clock_now_us() + f->timeout_ms * 1000;
    char *url = xstrdup(url0);
    xfer_t x = {.f = f};
    uint64_t received = 0;
    *res = R_ERROR;
    for (int hop = 0;; hop++) {
        image_url_t u;
        char w[300];
        if (image_url_check(f->allow, url, strlen(url), &u, w, sizeof w) != IMAGE_URL_OK) {
            snprintf(why, n, "%s%s", hop ? "redirected: " : "", w);
            *res = R_REFUSED;
            break;
        }
        int64_t left_ms = (deadline - clock_now_us()) / 1000;
        if (left_ms <= 0) {
            snprintf(why, n, "not fetched within %lld ms (the server's images.url_timeout_ms, "
                             "--image-url-timeout-ms)", (long long)f->timeout_ms);
            *res = R_TIMEOUT;
            break;
        }
        CURL *c = curl_easy_init();
        if (!c) {
            log_error("%s:%d: out of memory", __FILE__, __LINE__);
            abort();
        }
        x.literal = u.literal;
        x.internal = x.too_large = false;
        x.len = 0;
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L); /* by hand, each hop checked */
        curl_easy_setopt(c, CURLOPT_PROXY, "");           /* no proxy from the environment */
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)left_ms);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)left_ms);
        curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)f->max_bytes);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
        curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
        curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &x);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, &x);
        curl_easy_setopt(c, CURLOPT_USERAGENT, "pagoda-gateway");
        CURLcode rc = curl_easy_perform(c);
        received += x.len;
        long status = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        char *loc = NULL;
        if (rc == CURLE_OK && status >= 300 && status < 400) {
            char *l = NULL;
            curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &l);
            loc = l ? xstrdup(l) : NULL;
        }
        curl_easy_cleanup(c);
        if (rc == CURLE_OK && loc) {
            free(url);
            url = loc;
            if (hop + 1 > IMAGE_FETCH_MAX_REDIRECTS) {
                snprintf(why, n, "more than %d redirects", IMAGE_FETCH_MAX_REDIRECTS);
                *res = R_STATUS;
                break;
            }
            continue;
        }
        if (rc == CURLE_OK && status == 200) {
            *res = R_OK;
            *len = x.len;
            uint8_t *b = x.buf;
            x.buf = NULL;
            if (!b)
                b = xmalloc(1);
            free(url);
            if (f->m_bytes)
                metrics_counter_add(f->m_bytes, NULL, (double)received);
            return b;
        }
        if (rc == CURLE_OK) {
            snprintf(why, n, "the image URL answered HTTP %ld%s", status,
                     status >= 300 && status < 400 ? " without a Location" : "");
            *res = R_STATUS;
        } else if (x.internal) {
            snprintf(why, n, "host '%s' resolves to a loopback, private or link-local address, which a "
                             "host name on the allow list may not lead to (list the address itself to allow it)",
                     u.host);
            *res = R_REFUSED;
        } else if (x.too_large || rc == CURLE_FILESIZE_EXCEEDED) {
            snprintf(why, n, "the image at the URL is over %zu bytes (the server's images.max_bytes, "
                             "--image-max-bytes)", f->max_bytes);
            *res = R_TOO_LARGE;
        } else if (rc == CURLE_OPERATION_TIMEDOUT) {
            snprintf(why, n, "not fetched within %lld ms (the server's images.url_timeout_ms, "
                             "--image-url-timeout-ms)", (long long)f->timeout_ms);
            *res = R_TIMEOUT;
        } else if (rc == CURLE_ABORTED_BY_CALLBACK) {
            snprintf(why, n, "not fetched: the server is stopping");
            *res = R_ERROR;
        } else if (rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_CONNECT) {
            snprintf(why, n, "could not connect to '%s' (%s)", u.host, curl_easy_strerror(rc));
            *res = R_CONNECT;
        } else {
            snprintf(why, n, "the fetch failed (%s)", curl_easy_strerror(rc));
            *res = R_ERROR;
        }
        break;
    }
    if (f->m_bytes)
        metrics_counter_add(f->m_bytes, NULL, (double)received);
    free(x.buf);
    free(url);
    return NULL;
}

static void job_unref(image_fetch_job_t *j)
{
    pthread_mutex_lock(&j->lock);
    bool last = --j->refs == 0;
    pthread_mutex_unlock(&j->lock);
    if (!last)
        return;
    for (size_t i = 0; i < j->n; i++) {
        free(j->urls[i]);
        free(j->body[i]);
        free(j->why[i]);
    }
    free(j->urls);
    free(j->body);
    free(j->len);
    free(j->why);
    pthread_mutex_destroy(&j->lock);
    free(j);
}

static void job_finish(image_fetch_job_t *j)
{
    pthread_mutex_lock(&j->lock);
    j->done = true;
    if (j->parked && j->wake)
        j->wake(j->ctx);
    pthread_mutex_unlock(&j->lock);
    job_unref(j);
}

static void job_run(image_fetch_t *f, image_fetch_job_t *j)
{
    for (size_t i = 0; i < j->n; i++) {
        char why[600];
        result_t r;
        if (atomic_load(&f->stopping)) {
            snprintf(why, sizeof why, "not fetched: the server is stopping");
            r = R_ERROR;
        } else {
            j->body[i] = fetch_one(f, j->urls[i], &j->len[i], why, sizeof why, &r);
        }
        if (!j->body[i])
            j->why[i] = xstrdup(why);
        if (f->m_fetches)
            metrics_counter_add(f->m_fetches, (const char *[]){result_names[r]}, 1);
        if (r != R_OK)
            log_info("image URL %.200s: %s", j->urls[i], why);
    }
    job_finish(j);
}

static void *fetch_main(void *arg)
{
    image_fetch_t *f = arg;
    for (;;) {
        pthread_mutex_lock(&f->lock);
        while (!f->head && !atomic_load(&f->stopping))
            pthread_cond_wait(&f->cond, &f->lock);
        image_fetch_job_t *j = f->head;
        if (j) {
            f->head = j->next;
            if (!f->head)
                f->tail = NULL;
            f->n_queued--;
        }
        pthread_mutex_unlock(&f->lock);
        if (!j)
            return NULL; /* stopping and the queue is empty */
        job_run(f, j);
    }
}

image_fetch_t *image_fetch_new(const image_fetch_config_t *cfg, char *why, size_t n)
{
    image_url_allow_t *a = image_url_allow_parse(cfg->allow, why, n);
    if (!a)
        return NULL;
    pthread_once(&curl_once, curl_init_once);
    image_fetch_t *f = xcalloc(1, sizeof *f);
    f->allow = a;
    f->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : IMAGE_FETCH_DEFAULT_TIMEOUT_MS;
    f->max_bytes = cfg->max_bytes;
    pthread_mutex_init(&f->lock, NULL);
    pthread_cond_init(&f->cond, NULL);
    atomic_init(&f->stopping, false);
    if (cfg->metrics) {
        f->m_fetches = metrics_counter_new(cfg->metrics, "pagoda_image_url_fetches_total",
                                           "Remote image URLs fetched, by result (ok, refused, timeout, "
                                           "too_large, http_status, connect, error).",
                                           1, (const char *[]){"result"});
        f->m_bytes = metrics_counter_new(cfg->metrics, "pagoda_image_url_bytes_total",
                                         "Body bytes received from remote image URLs.", 0, NULL);
    }
    if (!a->n)
        return f; /* every URL is refused before a job is made */
    f->n_threads = cfg->n_threads ? cfg->n_threads : IMAGE_FETCH_THREADS;
    f->threads = xcalloc(f->n_threads, sizeof *f->threads);
    for (unsigned i = 0; i < f->n_threads; i++)
        if (pthread_create(&f->threads[i], NULL, fetch_main, f) != 0) {
            snprintf(why, n, "cannot start an image fetch thread");
            f->n_threads = i;
            image_fetch_free(&f);
            return NULL;
        }
    return f;
}

void image_fetch_free(image_fetch_t **fp)
{
    image_fetch_t *f = *fp;
    if (!f)
        return;
    *fp = NULL;
    pthread_mutex_lock(&f->lock);
    atomic_store(&f->stopping, true);
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
    /* the threads drain the queue (each job ends at once: stopping) */
    for (unsigned i = 0; i < f->n_threads; i++)
        pthread_join(f->threads[i], NULL);
    free(f->threads);
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->cond);
    image_url_allow_free(&f->allow);
    free(f);
}

image_fetch_job_t *image_fetch_submit(image_fetch_t *f, const char *const *urls, const size_t *lens, size_t n,
                                      void (*wake)(void *ctx), void *ctx)
{
    if (!f || !f->n_threads)
        return NULL;
    image_fetch_job_t *j = xcalloc(1, sizeof *j);
    pthread_mutex_init(&j->lock, NULL);
    j->refs = 2;
    j->wake = wake;
    j->ctx = ctx;
    j->n = n;
    j->urls = xcalloc(n, sizeof *j->urls);
    j->body = xcalloc(n, sizeof *j->body);
    j->len = xcalloc(n, sizeof *j->len);
    j->why = xcalloc(n, sizeof *j->why);
    for (size_t i = 0; i < n; i++)
        j->urls[i] = xstrndup(urls[i], lens[i]);
    pthread_mutex_lock(&f->lock);
    bool full = f->n_queued >= IMAGE_FETCH_MAX_QUEUE || atomic_load(&f->stopping);
    if (!full) {
        if (f->tail)
            f->tail->next = j;
        else
            f->head = j;
        f->tail = j;
        f->n_queued++;
        pthread_cond_signal(&f->cond);
    }
    pthread_mutex_unlock(&f->lock);
    if (full) {
        j->refs = 1;
        job_unref(j);
        return NULL;
    }
    return j;
}

bool image_fetch_job_park(image_fetch_job_t *j, void (*park)(void *ctx), void *ctx)
{
    pthread_mutex_lock(&j->lock);
    bool done = j->done;
    if (!done) {
        j->parked = true;
        park(ctx);
    }
    pthread_mutex_unlock(&j->lock);
    return done;
}

uint8_t *image_fetch_job_take(image_fetch_job_t *j, size_t i, size_t *len, const char **why)
{
    assert(j->done && i < j->n);
    uint8_t *b = j->body[i];
    j->body[i] = NULL;
    *len = b ? j->len[i] : 0;
    *why = b ? NULL : j->why[i];
    return b;
}

void image_fetch_job_release(image_fetch_job_t **jp)
{
    image_fetch_job_t *j = *jp;
    if (!j)
        return;
    *jp = NULL;
    pthread_mutex_lock(&j->lock);
    j->wake = NULL;
    pthread_mutex_unlock(&j->lock);
    job_unref(j);
}
