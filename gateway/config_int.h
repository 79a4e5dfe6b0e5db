/* config_int.h — the value checks gateway/config.c's field tables and
 * rules use, in config_check.c (each: 0 when s is acceptable, else -1 with
 * the reason in why[n]). Internal to config.c and config_check.c. */
#ifndef PAGODA_GATEWAY_CONFIG_INT_H
#define PAGODA_GATEWAY_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>

/* "HOST:PORT" / "[V6]:PORT"; `star` also allows "*" for host and port
 * (ZeroMQ bind syntax; port -1 = "*"). Host written to host_out (cap >= 256)
 * and the port to port_out when they are non-NULL; why may be NULL. */
int config_split_hostport(const char *s, bool star, int port_min, char *host_out, int *port_out, char *why,
                          size_t n);
int config_check_listen(const char *s, char *why, size_t n);   /* HOST:PORT */
int config_check_endpoint(const char *s, char *why, size_t n); /* tcp://HOST:PORT or ipc://PATH */
int config_check_name(const char *s, char *why, size_t n);     /* a model / adapter name */
int config_check_path(const char *s, char *why, size_t n);     /* a file path */
int config_check_origins(const char *s, char *why, size_t n);  /* CORS origins, comma-separated */
int config_check_hosts(const char *s, char *why, size_t n);    /* Host header names, comma-separated */
int config_check_url_allow(const char *s, char *why, size_t n); /* image URL hosts (gateway/image_fetch.h) */

#endif
