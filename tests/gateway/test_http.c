/* Unit tests for the HTTP front end's pure parts (http_guard.c, http.c): the Host check
 * (http_host_allowed, a table of Host values against listen hosts and
 * allowed_hosts lists) and http_parse_hostport. The HTTP edge itself is
 * tested over real sockets by tests/integration/auth_headers.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "gateway/http.h"
#include "gateway/http_guard.h"

static const struct host_case {
    const char *host;      /* the Host header, NULL = none */
    const char *listen;    /* the listen host */
    const char *allowed;   /* allowed_hosts, NULL = none */
    bool want;
} HOST_CASES[] = {
    /* no Host (HTTP/1.0): not a browser */
    {NULL, "127.0.0.1", NULL, true},
    /* IP literals and localhost, any port: no DNS name, no rebinding */
    {"127.0.0.1:8080", "127.0.0.1", NULL, true},
    {"127.0.0.1", "127.0.0.1", NULL, true},
    {"127.0.0.1:9000", "127.0.0.1", NULL, true},  /* docker -p 9000:8080 */
    {"10.96.0.12", "0.0.0.0", NULL, true},        /* a Kubernetes ClusterIP */
    {"[::1]:8080", "::1", NULL, true},
    {"[::1]", "127.0.0.1", NULL, true},
    {"[fe80::1]:80", "::", NULL, true},
    {"localhost:8080", "127.0.0.1", NULL, true},
    {"LOCALHOST", "127.0.0.1", NULL, true},
    {"localhost.:8080", "127.0.0.1", NULL, true},
    /* DNS names: refused unless the listen host or allowed */
    {"rebind.evil.example:8080", "127.0.0.1", NULL, false},
    {"evil.example", "0.0.0.0", NULL, false},
    {"localhost.evil.example", "127.0.0.1", NULL, false},
    {"127.0.0.1.evil.example", "127.0.0.1", NULL, false},
    {"sub.localhost", "127.0.0.1", NULL, false},
    {"gw.internal:8080", "gw.internal", NULL, true},  /* --listen gw.internal:8080 */
    {"GW.internal", "gw.internal", NULL, true},
    {"pagoda.svc:8080", "0.0.0.0", "pagoda.svc", true},
    {"pagoda.svc.:443", "0.0.0.0", "pagoda.svc", true},
    {"pagoda.svc.evil", "0.0.0.0", "pagoda.svc", false},
    {"xpagoda.svc", "0.0.0.0", "pagoda.svc", false},
    {"api.example.com", "0.0.0.0", "pagoda.svc, api.example.com", true},
    {"api.example.com", "0.0.0.0", "pagoda.svc,api.example.com", true},
    /* *.SUFFIX: names under it, not SUFFIX itself */
    {"pagoda.ns.svc.cluster.local:8080", "0.0.0.0", "*.svc.cluster.local", true},
    {"svc.cluster.local", "0.0.0.0", "*.svc.cluster.local", false},
    {"evilsvc.cluster.local", "0.0.0.0", "*.svc.cluster.local", false},
    /* "*": the check is off */
    {"anything.example:1", "0.0.0.0", "*", true},
    /* malformed Host values */
    {"", "127.0.0.1", NULL, false},
    {":8080", "127.0.0.1", NULL, false},
    {"127.0.0.1:80x", "127.0.0.1", NULL, false},
    {"127.0.0.1:", "127.0.0.1", NULL, false},
    {"[::1", "127.0.0.1", NULL, false},
    {"[::1]x", "127.0.0.1", NULL, false},
    {"[evil.example]:80", "127.0.0.1", "*", false},
    {"a:b:c", "127.0.0.1", NULL, false},
};

static void test_host_allowed(void **st)
{
    (void)st;
    for (size_t i = 0; i < sizeof HOST_CASES / sizeof HOST_CASES[0]; i++) {
        const struct host_case *k = &HOST_CASES[i];
        bool got = http_host_allowed(k->host, k->listen, k->allowed);
        if (got != k->want)
            fail_msg("Host '%s' (listen %s, allowed %s): %s, want %s", k->host ? k->host : "(none)",
                     k->listen, k->allowed ? k->allowed : "(none)", got ? "allowed" : "refused",
                     k->want ? "allowed" : "refused");
    }
}

static void test_parse_hostport(void **st)
{
    (void)st;
    char host[64];
    uint16_t port = 0;
    assert_int_equal(http_parse_hostport("127.0.0.1:8080", host, sizeof host, &port), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 8080);
    assert_int_equal(http_parse_hostport("[::1]:0", host, sizeof host, &port), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 0);
    assert_int_equal(http_parse_hostport("127.0.0.1", host, sizeof host, &port), -1);
    assert_int_equal(http_parse_hostport("[::1]8080", host, sizeof host, &port), -1);
    assert_int_equal(http_parse_hostport("h:65536", host, sizeof host, &port), -1);
    assert_int_equal(http_parse_hostport(":80", host, sizeof host, &port), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_allowed),
        cmocka_unit_test(test_parse_hostport),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
