/* Unit tests for gateway/image_fetch's allow list (no network): the entry
 * parser, the URL check against a list (tricky URLs: a user name before an
 * allowed host, a fragment holding '@', IPv6 literals, case, a trailing
 * dot, ports, percent-encoding, other schemes), the internal-address test
 * the socket hook applies, and the fetcher's refusal of jobs when its list is
 * empty. The fetches themselves are tested against a real HTTP server in
 * tests/integration/image_url.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "gateway/image_fetch.h"

static const char *const LIST = "images.example.com, *.cdn.example.net 127.0.0.1:8000,[::1]:8080,"
                                "Upper.Example.ORG.,10.1.2.3";

/* one URL against LIST: the status, and on OK the host and port it read */
static const struct {
    const char *url;
    image_url_status_t want;
    const char *host; /* on OK */
    unsigned port;
    bool literal;
} cases[] = {
    {"http://images.example.com/a.png", IMAGE_URL_OK, "images.example.com", 80, false},
    {"https://images.example.com/a.png", IMAGE_URL_OK, "images.example.com", 443, false},
    {"https://images.example.com:9443/a.png?x=1#f", IMAGE_URL_OK, "images.example.com", 9443, false},
    {"HTTP://IMAGES.EXAMPLE.COM/a.png", IMAGE_URL_OK, "images.example.com", 80, false},
    {"http://images.example.com./a.png", IMAGE_URL_OK, "images.example.com", 80, false},
    {"http://upper.example.org/a.png", IMAGE_URL_OK, "upper.example.org", 80, false},
    {"http://a.cdn.example.net/x", IMAGE_URL_OK, "a.cdn.example.net", 80, false},
    {"http://a.b.cdn.example.net/x", IMAGE_URL_OK, "a.b.cdn.example.net", 80, false},
    {"http://cdn.example.net/x", IMAGE_URL_E_DENIED, NULL, 0, false},          /* *.S is not S */
    {"http://evilcdn.example.net/x", IMAGE_URL_E_DENIED, NULL, 0, false},      /* not a label boundary */
    {"http://127.0.0.1:8000/cat.png", IMAGE_URL_OK, "127.0.0.1", 8000, true},
    {"http://127.0.0.1:8001/cat.png", IMAGE_URL_E_DENIED, NULL, 0, false},     /* port mismatch */
    {"http://127.0.0.1/cat.png", IMAGE_URL_E_DENIED, NULL, 0, false},          /* port 80 */
    {"http://localhost:8000/cat.png", IMAGE_URL_E_DENIED, NULL, 0, false},     /* a name is not the address */
    {"http://[::1]:8080/x", IMAGE_URL_OK, "::1", 8080, true},
    {"http://[0:0:0:0:0:0:0:1]:8080/x", IMAGE_URL_OK, "::1", 8080, true},      /* the same address */
    {"http://[::1]:8000/x", IMAGE_URL_E_DENIED, NULL, 0, false},
    {"http://[::2]:8080/x", IMAGE_URL_E_DENIED, NULL, 0, false},
    {"http://10.1.2.3:1234/x", IMAGE_URL_OK, "10.1.2.3", 1234, true},           /* no port: any */
    /* a user name: the host is evil, and user names are refused anyway */
    {"http://images.example.com@evil.example/a.png", IMAGE_URL_E_USERINFO, NULL, 0, false},
    {"http://user:pw@images.example.com/a.png", IMAGE_URL_E_USERINFO, NULL, 0, false},
    /* a fragment with '@': the host is evil */
    {"http://evil.example#@images.example.com/a.png", IMAGE_URL_E_DENIED, NULL, 0, false},
    {"http://evil.example?@images.example.com/a.png", IMAGE_URL_E_DENIED, NULL, 0, false},
    {"http://evil.example/images.example.com/a.png", IMAGE_URL_E_DENIED, NULL, 0, false},
    {"http://images.example.com.evil.example/a.png", IMAGE_URL_E_DENIED, NULL, 0, false},
    /* percent-encoding in the host (which a resolver might decode): refused */
    {"http://images%2eexample.com/a.png", IMAGE_URL_E_HOST, NULL, 0, false},
    {"http://%69mages.example.com/a.png", IMAGE_URL_E_HOST, NULL, 0, false},
    {"http://[fe80::1%25eth0]:8080/x", IMAGE_URL_E_HOST, NULL, 0, false},
    /* other schemes */
    {"file:///etc/passwd", IMAGE_URL_E_SCHEME, NULL, 0, false},
    {"gopher://images.example.com/1", IMAGE_URL_E_SCHEME, NULL, 0, false},
    {"ftp://images.example.com/a.png", IMAGE_URL_E_SCHEME, NULL, 0, false},
    {"javascript:alert(1)", IMAGE_URL_E_SCHEME, NULL, 0, false},
    {"images.example.com/a.png", IMAGE_URL_E_SYNTAX, NULL, 0, false},
    {"http://", IMAGE_URL_E_SYNTAX, NULL, 0, false},
};

static void test_check(void **st)
{
    (void)st;
    char why[300];
    image_url_allow_t *a = image_url_allow_parse(LIST, why, sizeof why);
    assert_non_null(a);
    assert_int_equal(image_url_allow_count(a), 6);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        image_url_t u;
        why[0] = '\0';
        image_url_status_t got = image_url_check(a, cases[i].url, strlen(cases[i].url), &u, why, sizeof why);
        if (got != cases[i].want)
            fail_msg("%s: status %d, want %d (%s)", cases[i].url, got, cases[i].want, why);
        if (got != IMAGE_URL_OK) {
            assert_true(why[0] != '\0');
            continue;
        }
        assert_string_equal(u.host, cases[i].host);
        assert_int_equal(u.port, cases[i].port);
        assert_int_equal(u.literal, cases[i].literal);
    }
    image_url_allow_free(&a);
    assert_null(a);
}

/* An empty list refuses every well-formed http(s) URL, saying how to allow
 * one; the length is honoured (no NUL needed, a NUL inside refused). */
static void test_empty_and_lengths(void **st)
{
    (void)st;
    char why[300];
    image_url_allow_t *a = image_url_allow_parse(NULL, why, sizeof why);
    assert_non_null(a);
    image_url_t u;
    assert_int_equal(image_url_check(a, "https://example.com/a.png", 25, &u, why, sizeof why),
                     IMAGE_URL_E_DISABLED);
    assert_non_null(strstr(why, "--image-url-allow"));
    assert_int_equal(image_url_check(NULL, "https://example.com/a.png", 25, &u, why, sizeof why),
                     IMAGE_URL_E_DISABLED);
    image_url_allow_free(&a);
    a = image_url_allow_parse("example.com", why, sizeof why);
    const char buf[] = "http://example.com/a.pngXYZ";
    assert_int_equal(image_url_check(a, buf, strlen(buf) - 3, &u, why, sizeof why), IMAGE_URL_OK);
    const char nul[] = "http://example.com/\0http://evil/";
    assert_int_equal(image_url_check(a, nul, sizeof nul - 1, &u, why, sizeof why), IMAGE_URL_E_SYNTAX);
    image_url_allow_free(&a);
}

static void test_parse_errors(void **st)
{
    (void)st;
    static const char *const bad[] = {
        "http://example.com", "example.com/path", "::1", "[::1", "[example.com]:80", "example.com:0",
        "example.com:65536", "example.com:", "example.com:8x", "ex ample.com:80:90", "a..b", "*.",
        "exa$mple.com", "user@example.com",
    };
    char why[300];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        image_url_allow_t *a = image_url_allow_parse(bad[i], why, sizeof why);
        if (a)
            fail_msg("'%s' parsed as an allow list", bad[i]);
        assert_true(why[0] != '\0');
    }
    image_url_allow_t *a = image_url_allow_parse(" , a.example ,, b.example:81 ", why, sizeof why);
    assert_non_null(a);
    assert_int_equal(image_url_allow_count(a), 2);
    image_url_allow_free(&a);
}

static bool internal4(const char *s)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    assert_int_equal(inet_pton(AF_INET, s, &a.sin_addr), 1);
    return image_url_addr_internal((const struct sockaddr *)&a);
}

static bool internal6(const char *s)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6};
    assert_int_equal(inet_pton(AF_INET6, s, &a.sin6_addr), 1);
    return image_url_addr_internal((const struct sockaddr *)&a);
}

static void test_internal_addresses(void **st)
{
    (void)st;
    static const char *const in4[] = {"127.0.0.1", "127.255.1.2", "10.0.0.1", "172.16.0.1", "172.31.255.255",
                                      "192.168.1.1", "169.254.169.254", "0.0.0.0", "100.64.0.1",
                                      "224.0.0.1", "255.255.255.255"};
    static const char *const out4[] = {"8.8.8.8", "172.32.0.1", "172.15.255.255", "100.128.0.1", "1.1.1.1",
                                       "192.169.0.1"};
    static const char *const in6[] = {"::1", "::", "fe80::1", "fc00::1", "fd12:3456::1", "ff02::1",
                                      "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:10.0.0.1",
                                      "64:ff9b::a9fe:a9fe"};
    static const char *const out6[] = {"2001:4860:4860::8888", "2606:4700::1111", "::ffff:8.8.8.8"};
    for (size_t i = 0; i < sizeof in4 / sizeof in4[0]; i++)
        if (!internal4(in4[i]))
            fail_msg("%s is internal", in4[i]);
    for (size_t i = 0; i < sizeof out4 / sizeof out4[0]; i++)
        if (internal4(out4[i]))
            fail_msg("%s is not internal", out4[i]);
    for (size_t i = 0; i < sizeof in6 / sizeof in6[0]; i++)
        if (!internal6(in6[i]))
            fail_msg("%s is internal", in6[i]);
    for (size_t i = 0; i < sizeof out6 / sizeof out6[0]; i++)
        if (internal6(out6[i]))
            fail_msg("%s is not internal", out6[i]);
}

static void never(void *ctx)
{
    (void)ctx;
    fail_msg("woken");
}

/* A fetcher without a list starts no thread and takes no job; a bad list
 * is refused with the reason. */
static void test_fetcher_empty(void **st)
{
    (void)st;
    char why[300];
    image_fetch_t *f = image_fetch_new(&(image_fetch_config_t){.allow = "", .max_bytes = 100}, why, sizeof why);
    assert_non_null(f);
    const char *u = "http://example.com/a.png";
    size_t n = strlen(u);
    assert_null(image_fetch_submit(f, &u, &n, 1, never, NULL));
    image_fetch_free(&f);
    assert_null(f);
    assert_null(image_fetch_new(&(image_fetch_config_t){.allow = "http://x", .max_bytes = 100}, why, sizeof why));
    assert_non_null(strstr(why, "http://x"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_empty_and_lengths),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_internal_addresses),
        cmocka_unit_test(test_fetcher_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
