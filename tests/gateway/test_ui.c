/* Unit tests for gateway/ui: every file of the console's table is served
 * with its media type and the security headers, and its embedded bytes are
 * the file in gateway/ui/ (read from the source tree: the .incbin reference);
 * every page reference (href, src, module import) names a table file; names
 * outside the table — traversal spellings included — are not served; ETags
 * give 304; ui_origin_is_self on a table of Origin/Host pairs.
 * Runs from the repository root (tests/run.sh does). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/ui.h"
#include "tests/support/support.h"

static bool in_table(const char *name, size_t n)
{
    for (size_t i = 0;; i++) {
        const char *t = ui_file_get(i, NULL, NULL);
        if (!t)
            return false;
        if (strlen(t) == n && memcmp(t, name, n) == 0)
            return true;
    }
}

static void test_every_file(void **st)
{
    (void)st;
    size_t n_files = 0;
    for (size_t i = 0;; i++) {
        const unsigned char *data;
        size_t len;
        const char *name = ui_file_get(i, &data, &len);
        if (!name)
            break;
        n_files++;
        char path[256];
        snprintf(path, sizeof path, "gateway/ui/%s", name[0] ? name : "index.html");
        size_t disk_len;
        unsigned char *disk = support_read_file(path, &disk_len);
        if (!disk)
            fail_msg("%s: not readable (run from the repository root)", path);
        assert_int_equal(len, disk_len);
        assert_memory_equal(data, disk, len);
        free(disk);

        unsigned status = 0;
        struct MHD_Response *r = ui_response(name, NULL, &status);
        assert_non_null(r);
        assert_int_equal(status, 200);
        const char *type = MHD_get_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
        assert_non_null(type);
        const char *dot = strrchr(path, '.');
        const char *want = strcmp(dot, ".html") == 0 ? "text/html; charset=utf-8"
                           : strcmp(dot, ".css") == 0 ? "text/css; charset=utf-8"
                           : strcmp(dot, ".js") == 0  ? "text/javascript; charset=utf-8"
                           : strcmp(dot, ".svg") == 0 ? "image/svg+xml"
                                                      : "?";
        assert_string_equal(type, want);
        const char *csp = MHD_get_response_header(r, "Content-Security-Policy");
        assert_non_null(csp);
        assert_non_null(strstr(csp, "default-src 'none'"));
        assert_non_null(strstr(csp, "script-src 'self';"));
        assert_non_null(strstr(csp, "frame-ancestors 'none'"));
        assert_null(strstr(csp, "unsafe"));
        assert_string_equal(MHD_get_response_header(r, "X-Content-Type-Options"), "nosniff");
        assert_string_equal(MHD_get_response_header(r, "X-Frame-Options"), "DENY");
        const char *et = MHD_get_response_header(r, MHD_HTTP_HEADER_ETAG);
        assert_non_null(et);
        assert_int_equal(strlen(et), 34);
        char etag[40];
        snprintf(etag, sizeof etag, "%s", et); /* the response owns et */
        char inm[128];
        snprintf(inm, sizeof inm, "W/\"0000\", %s", etag);
        MHD_destroy_response(r);

        /* the ETag (alone, in a list, weak or "*") answers 304 */
        const char *fresh[] = {etag, inm, "*"};
        for (size_t k = 0; k < 3; k++) {
            r = ui_response(name, fresh[k], &status);
            assert_non_null(r);
            assert_int_equal(status, 304);
            MHD_destroy_response(r);
        }
        r = ui_response(name, "\"00000000000000000000000000000000\"", &status);
        assert_int_equal(status, 200);
        MHD_destroy_response(r);
    }
    assert_true(n_files >= 9);
}

/* Every href="..." / src="..." of the page and every `from "./x.js"` of a
 * module names a file of the table: a file added to gateway/ui/ but not to
 * the table would 404 in the browser. */
static void test_references_resolve(void **st)
{
    (void)st;
    size_t n_refs = 0;
    for (size_t i = 0;; i++) {
        const unsigned char *data;
        size_t len;
        const char *name = ui_file_get(i, &data, &len);
        if (!name)
            break;
        char *text = strndup((const char *)data, len);
        const char *pats[] = {"href=\"", "src=\"", "from \"./"};
        for (size_t k = 0; k < 3; k++) {
            for (const char *p = text; (p = strstr(p, pats[k])); ) {
                p += strlen(pats[k]);
                size_t n = strcspn(p, "\"");
                if (p[0] == '#') /* in-page links (tabs) */
                    continue;
                if (!in_table(p, n))
                    fail_msg("%s refers to '%.*s', which is not in the table", name, (int)n, p);
                n_refs++;
            }
        }
        free(text);
    }
    assert_true(n_refs >= 10);
}

static void test_outside_names(void **st)
{
    (void)st;
    static const char *names[] = {
        "..", "../ui.c", "../../Makefile", "%2e%2e/ui.c", "..%2fui.c", "/etc/passwd",
        "index.html/", "index.html/x", "./index.html", "INDEX.HTML", "index.htm", "ui.c",
        "app.js.map", "app", " app.js", "app.js ", "app.js?x", "style.css\\", "icon.svg/..",
        "a/b", "//", ".", "x",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        unsigned status = 0;
        struct MHD_Response *r = ui_response(names[i], NULL, &status);
        if (r)
            fail_msg("'%s' was served", names[i]);
    }
    struct MHD_Response *r = ui_redirect();
    assert_non_null(r);
    assert_string_equal(MHD_get_response_header(r, MHD_HTTP_HEADER_LOCATION), "/ui/");
    MHD_destroy_response(r);
}

static void test_origin_is_self(void **st)
{
    (void)st;
    static const struct {
        const char *origin, *host;
        bool self;
    } cases[] = {
        {"http://127.0.0.1:8080", "127.0.0.1:8080", true},
        {"http://127.0.0.1", "127.0.0.1", true},
        {"HTTP://LOCALHOST:8080", "localhost:8080", true},
        {"http://[::1]:8080", "[::1]:8080", true},
        {"http://10.1.2.3:80", "10.1.2.3:80", true},
        /* another port or host: another origin */
        {"http://127.0.0.1:8081", "127.0.0.1:8080", false},
        {"http://127.0.0.2:8080", "127.0.0.1:8080", false},
        {"http://localhost:8080", "127.0.0.1:8080", false},
        /* DNS names never: an attacker's name may resolve here (rebinding) */
        {"http://evil.example:8080", "evil.example:8080", false},
        {"http://localhost.evil.example", "localhost.evil.example", false},
        {"http://127.0.0.1.nip.io:8080", "127.0.0.1.nip.io:8080", false},
        /* https (a TLS proxy in front) is listed with --cors-origin instead */
        {"https://127.0.0.1:8080", "127.0.0.1:8080", false},
        {"null", "127.0.0.1:8080", false},
        {"http://127.0.0.1:8080/", "127.0.0.1:8080", false},
        {"http://127.0.0.1:8080", "127.0.0.1:8080/", false},
        {"http://127.0.0.1:80800", "127.0.0.1:80800", false},
        {"http://127.0.0.1:", "127.0.0.1:", false},
        {"http://[::1", "[::1", false},
        {"http://[zz]:1", "[zz]:1", false},
        {"http://1.2.3:8080", "1.2.3:8080", false},
        {"http://", "", false},
        {NULL, "127.0.0.1:8080", false},
        {"http://127.0.0.1:8080", NULL, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (ui_origin_is_self(cases[i].origin, cases[i].host) != cases[i].self)
            fail_msg("case %zu: origin '%s', host '%s': want %s", i,
                     cases[i].origin ? cases[i].origin : "(null)",
                     cases[i].host ? cases[i].host : "(null)", cases[i].self ? "self" : "foreign");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_file),
        cmocka_unit_test(test_references_resolve),
        cmocka_unit_test(test_outside_names),
        cmocka_unit_test(test_origin_is_self),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
