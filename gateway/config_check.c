/* config_check.c — the checks of config values (host:port, endpoints,
 * names, paths, origin and host lists) that gateway/config.c's field
 * tables and rules use (config_int.h). */
#include "gateway/config_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/config.h"
#include "gateway/image_fetch.h"
#include "gateway/model_name.h"

/* Splits "HOST:PORT" / "[V6]:PORT". Host chars: a name or address; `star`
 * also allows "*" for host and port (ZeroMQ bind syntax; port -1 = "*").
 * On success host is written to host_out (cap ≥ 256) when non-NULL. */
int config_split_hostport(const char *s, bool star, int port_min, char *host_out, int *port_out,
                          char *why, size_t n)
{
    const char *colon, *h0, *h1;
    if (s[0] == '[') {
        const char *rb = strchr(s, ']');
        if (!rb || rb == s + 1) {
            snprintf(why, n, "expected [IPv6]:PORT");
            return -1;
        }
        for (const char *p = s + 1; p < rb; p++)
            if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.') {
                snprintf(why, n, "bad character in IPv6 address");
                return -1;
            }
        if (rb[1] != ':') {
            snprintf(why, n, "expected ':PORT' after ']'");
            return -1;
        }
        h0 = s + 1;
        h1 = rb;
        colon = rb + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon) {
            snprintf(why, n, "expected HOST:PORT");
            return -1;
        }
        if (memchr(s, ':', (size_t)(colon - s))) {
            snprintf(why, n, "an IPv6 address must be in brackets, e.g. [::1]:8080");
            return -1;
        }
        h0 = s;
        h1 = colon;
        if (h1 == h0) {
            snprintf(why, n, "missing host before ':'");
            return -1;
        }
        bool is_star = star && h1 - h0 == 1 && *h0 == '*';
        for (const char *p = h0; p < h1 && !is_star; p++)
            if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-' && *p != '_') {
                snprintf(why, n, "bad character '%c' in host", isprint((unsigned char)*p) ? *p : '?');
                return -1;
            }
    }
    if (h1 - h0 > 253) {
        snprintf(why, n, "host name too long");
        return -1;
    }
    const char *ps = colon + 1;
    int port = 0;
    if (star && strcmp(ps, "*") == 0) {
        port = -1;
    } else {
        size_t nd = strlen(ps);
        if (nd == 0 || nd > 5 || strspn(ps, "0123456789") != nd) {
            snprintf(why, n, "expected a port number after ':'");
            return -1;
        }
        port = atoi(ps);
        if (port < port_min || port > 65535) {
            snprintf(why, n, "port must be in %d..65535", port_min);
            return -1;
        }
    }
    if (host_out) {
        memcpy(host_out, h0, (size_t)(h1 - h0));
        host_out[h1 - h0] = 0;
    }
    if (port_out)
        *port_out = port;
    return 0;
}

int config_check_listen(const char *s, char *why, size_t n)
{
    return config_split_hostport(s, false, 0, NULL, NULL, why, n);
}

int config_check_endpoint(const char *s, char *why, size_t n)
{
    if (strncmp(s, "tcp://", 6) == 0)
        return config_split_hostport(s + 6, true, 1, NULL, NULL, why, n);
    if (strncmp(s, "ipc://", 6) == 0) {
        if (s[6] == 0) {
            snprintf(why, n, "ipc:// needs a socket path");
            return -1;
        }
        return 0;
    }
    snprintf(why, n, "expected tcp://HOST:PORT or ipc://PATH (workers are separate processes)");
    return -1;
}

int config_check_name(const char *s, char *why, size_t n)
{
    _Static_assert(CONFIG_MAX_NAME == MODEL_NAME_MAX, "one name rule");
    return model_name_check(s, why, n);
}

int config_check_path(const char *s, char *why, size_t n)
{
    if (s[0] == 0) {
        snprintf(why, n, "a path must not be empty");
        return -1;
    }
    return 0;
}

/* Walks a list of ITEM[,ITEM...] (commas and/or blanks between), asking
 * `item` about each; -1 with *why set by the first refused item, or when
 * the list is empty (`none` says what was wanted). */
static int check_list(const char *s, int (*item)(const char *p, size_t len), const char *refusal,
                      const char *none, char *why, size_t n)
{
    size_t n_seen = 0;
    for (const char *p = s; *p; p += strcspn(p, ", \t")) {
        p += strspn(p, ", \t");
        size_t len = strcspn(p, ", \t");
        if (len == 0)
            break;
        n_seen++;
        if (item(p, len) < 0) {
            snprintf(why, n, "'%.*s' %s", (int)(len > 64 ? 64 : len), p, refusal);
            return -1;
        }
    }
    if (n_seen == 0) {
        snprintf(why, n, "%s", none);
        return -1;
    }
    return 0;
}

/* A cors_origins entry: "*" or a browser origin scheme://host[:port] —
 * http or https, no path, no trailing slash (a browser's Origin header
 * never has one, so such an entry could never match). */
static int origin_item(const char *p, size_t len)
{
    if (len == 1 && p[0] == '*')
        return 0;
    const char *host = NULL;
    if (len > 7 && strncmp(p, "http://", 7) == 0)
        host = p + 7;
    else if (len > 8 && strncmp(p, "https://", 8) == 0)
        host = p + 8;
    return host && !memchr(host, '/', len - (size_t)(host - p)) && len <= 256 ? 0 : -1;
}

/* An allowed_hosts entry: a DNS name (letters, digits, '-', '_', '.'; no
 * port: any port is accepted), "*.SUFFIX" or "*". */
static int host_item(const char *p, size_t len)
{
    if (len == 1 && p[0] == '*')
        return 0;
    const char *name = p;
    size_t nl = len;
    if (nl >= 2 && name[0] == '*' && name[1] == '.') {
        name += 2;
        nl -= 2;
    }
    bool ok = nl > 0 && len <= 253 && name[0] != '.' &&
              strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") >= nl;
    return ok ? 0 : -1;
}

/* cors_origins: ORIGIN[,ORIGIN...] */
int config_check_origins(const char *s, char *why, size_t n)
{
    return check_list(s, origin_item,
                      "is not an origin: want * or http[s]://HOST[:PORT] (no path, no trailing slash, "
                      "at most 256 bytes)",
                      "no origin given (want ORIGIN[,ORIGIN...], or null for none)", why, n);
}

/* allowed_hosts: NAME[,NAME...] */
int config_check_hosts(const char *s, char *why, size_t n)
{
    return check_list(s, host_item,
                      "is not a host name: want NAME, *.SUFFIX or * (letters, digits, '-', '_', '.'; "
                      "no port, no scheme)",
                      "no host name given (want NAME[,NAME...], or null for none)", why, n);
}

/* images.url_allow: the list as image_fetch parses it. */
int config_check_url_allow(const char *s, char *why, size_t n)
{
    char w[200];
    image_url_allow_t *a = image_url_allow_parse(s, w, sizeof w);
    if (!a) {
        snprintf(why, n, "%s", w);
        return -1;
    }
    image_url_allow_free(&a);
    return 0;
}
