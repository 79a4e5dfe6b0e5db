/* log.c — leveled logging to stderr (see log.h). */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static char g_component[32] = "pagoda";
static enum log_level g_level = LOG_INFO;

static const char *const level_names[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};

int log_level_parse(const char *s)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (s && strcasecmp(s, names[i]) == 0)
            return i;
    return -1;
}

void log_init(const char *component, enum log_level level)
{
    snprintf(g_component, sizeof g_component, "%s", component ? component : "pagoda");
    g_level = level;
    int env = log_level_parse(getenv("PAGODA_LOG"));
    if (env >= 0)
        g_level = (enum log_level)env;
}

void log_set_level(enum log_level level) { g_level = level; }
enum log_level log_get_level(void) { return g_level; }

void log_msg(enum log_level level, const char *fmt, ...)
{
    if (level < g_level)
        return;
    char line[2048];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = (int)strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += snprintf(line + n, sizeof line - (size_t)n, ".%03ldZ %s %s[%d]: ",
                  ts.tv_nsec / 1000000, level_names[level], g_component, (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    n += m;
    if (n > (int)sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}
