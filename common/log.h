/* log.h — leveled logging to stderr, shared by every pagoda process.
 *
 * One line per message: "2026-11-22T10:00:00.123Z INFO  gateway: text".
 * The component name is set once per process with log_init(). The level comes
 * from log_init() or, when set, the PAGODA_LOG environment variable
 * (debug|info|warn|error). Thread-safe: each line is written with one write(2).
 */
#ifndef PAGODA_COMMON_LOG_H
#define PAGODA_COMMON_LOG_H

enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3 };

/* Sets the component name (copied) and the default level. */
void log_init(const char *component, enum log_level level);
void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* Parses "debug", "info", "warn" or "error"; returns -1 for anything else. */
int log_level_parse(const char *s);

void log_msg(enum log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
