/* ui.c — the web console's files, embedded with .incbin, and the one
 * handler that serves them from a fixed table (see ui.h). */
#include "gateway/ui.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <pthread.h>
#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* UI_EMBED(sym, "gateway/ui/FILE") defines sym[] .. sym_end[] in .rodata
 * with the file's bytes. The path is relative to the directory the compiler
 * runs in: the Makefile builds from the repository root, and makes ui.o
 * depend on gateway/ui/ so an edited file is embedded again. */
#define UI_EMBED(sym, path)                                                            \
    __asm__(".pushsection .rodata\n"                                                   \
            ".balign 16\n" #sym ":\n"                                                  \
            ".incbin \"" path "\"\n" #sym "_end:\n"                                    \
            ".byte 0\n"                                                                \
            ".popsection\n");                                                          \
    extern const unsigned char sym[], sym##_end[]

UI_EMBED(ui_index_html, "gateway/ui/index.html");
UI_EMBED(ui_style_css, "gateway/ui/style.css");
UI_EMBED(ui_app_js, "gateway/ui/app.js");
UI_EMBED(ui_api_js, "gateway/ui/api.js");
UI_EMBED(ui_chat_js, "gateway/ui/chat.js");
UI_EMBED(ui_ops_js, "gateway/ui/ops.js");
UI_EMBED(ui_markdown_js, "gateway/ui/markdown.js");
UI_EMBED(ui_sse_js, "gateway/ui/sse.js");
UI_EMBED(ui_icon_svg, "gateway/ui/icon.svg");

#define TYPE_JS "text/javascript; charset=utf-8"

/* The table: URL name after /ui/ → bytes and media type. "" is the index. */
static const struct ui_file {
    const char *name;
    const char *type;
    const unsigned char *data, *end;
} files[] = {
    {"", "text/html; charset=utf-8", ui_index_html, ui_index_html_end},
    {"index.html", "text/html; charset=utf-8", ui_index_html, ui_index_html_end},
    {"style.css", "text/css; charset=utf-8", ui_style_css, ui_style_css_end},
    {"app.js", TYPE_JS, ui_app_js, ui_app_js_end},
    {"api.js", TYPE_JS, ui_api_js, ui_api_js_end},
    {"chat.js", TYPE_JS, ui_chat_js, ui_chat_js_end},
    {"ops.js", TYPE_JS, ui_ops_js, ui_ops_js_end},
    {"markdown.js", TYPE_JS, ui_markdown_js, ui_markdown_js_end},
    {"sse.js", TYPE_JS, ui_sse_js, ui_sse_js_end},
    {"icon.svg", "image/svg+xml", ui_icon_svg, ui_icon_svg_end},
};
#define N_FILES (sizeof files / sizeof files[0])

static const char CSP[] = "default-src 'none'; script-src 'self'; style-src 'self'; "
                          "img-src 'self'; connect-src 'self'; base-uri 'none'; "
                          "form-action 'none'; frame-ancestors 'none'";

/* ETags: a BLAKE2b-128 of each file's bytes, quoted, computed once. */
static char etags[N_FILES][36];
static pthread_once_t etags_once = PTHREAD_ONCE_INIT;

static void etags_init(void)
{
    for (size_t i = 0; i < N_FILES; i++) {
        unsigned char h[16];
        crypto_generichash(h, sizeof h, files[i].data, (size_t)(files[i].end - files[i].data), NULL, 0);
        etags[i][0] = '"';
        sodium_bin2hex(etags[i] + 1, sizeof etags[i] - 2, h, sizeof h);
        strcat(etags[i], "\"");
    }
}

static void add_security_headers(struct MHD_Response *r)
{
    MHD_add_response_header(r, "Content-Security-Policy", CSP);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
}

/* If-None-Match holds `etag` (a list "A, B" or "*" also match). */
static bool etag_matches(const char *inm, const char *etag)
{
    size_t n = strlen(etag);
    for (const char *p = inm; *p;) {
        p += strspn(p, " \t,");
        if (*p == '*')
            return true;
        if (strncmp(p, "W/", 2) == 0)
            p += 2;
        size_t k = strcspn(p, " \t,");
        if (k == n && memcmp(p, etag, n) == 0)
            return true;
        p += k;
    }
    return false;
}

struct MHD_Response *ui_redirect(void)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return NULL;
    MHD_add_response_header(r, MHD_HTTP_HEADER_LOCATION, "/ui/");
    add_security_headers(r);
    return r;
}

struct MHD_Response *ui_response(const char *name, const char *if_none_match, unsigned *status)
{
    for (size_t i = 0; i < N_FILES; i++) {
        if (strcmp(files[i].name, name) != 0)
            continue;
        pthread_once(&etags_once, etags_init);
        bool fresh = if_none_match && etag_matches(if_none_match, etags[i]);
        size_t len = fresh ? 0 : (size_t)(files[i].end - files[i].data);
        struct MHD_Response *r =
            MHD_create_response_from_buffer(len, (void *)files[i].data, MHD_RESPMEM_PERSISTENT);
        if (!r)
            return NULL;
        if (!fresh)
            MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, files[i].type);
        MHD_add_response_header(r, MHD_HTTP_HEADER_ETAG, etags[i]);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        add_security_headers(r);
        *status = fresh ? 304 : 200;
        return r;
    }
    return NULL;
}

const char *ui_file_get(size_t i, const unsigned char **data, size_t *len)
{
    if (i >= N_FILES)
        return NULL;
    if (data)
        *data = files[i].data;
    if (len)
        *len = (size_t)(files[i].end - files[i].data);
    return files[i].name;
}

/* host = NAME-OR-ADDRESS [":" PORT]: true for an IP literal or localhost
 * with a well-formed port. */
static bool host_is_literal(const char *host)
{
    char name[64];
    const char *port;
    size_t n;
    if (host[0] == '[') {
        const char *close = strchr(host, ']');
        if (!close)
            return false;
        n = (size_t)(close - host - 1);
        if (n == 0 || n >= sizeof name)
            return false;
        memcpy(name, host + 1, n);
        name[n] = '\0';
        unsigned char a6[16];
        if (inet_pton(AF_INET6, name, a6) != 1)
            return false;
        port = close + 1;
    } else {
        n = strcspn(host, ":");
        if (n == 0 || n >= sizeof name)
            return false;
        memcpy(name, host, n);
        name[n] = '\0';
        unsigned char a4[4];
        if (strcasecmp(name, "localhost") != 0 && inet_pton(AF_INET, name, a4) != 1)
            return false;
        port = host + n;
    }
    if (*port == '\0')
        return true;
    if (*port != ':')
        return false;
    port++;
    size_t digits = strspn(port, "0123456789");
    return digits >= 1 && digits <= 5 && port[digits] == '\0' && atoi(port) <= 65535;
}

bool ui_origin_is_self(const char *origin, const char *host)
{
    static const char scheme[] = "http://";
    if (!origin || !host || strncasecmp(origin, scheme, sizeof scheme - 1) != 0)
        return false;
    return strcasecmp(origin + sizeof scheme - 1, host) == 0 && host_is_literal(host);
}
