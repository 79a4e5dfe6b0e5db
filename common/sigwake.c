/* sigwake.c — SIGINT/SIGTERM → eventfd (see sigwake.h). */
#include "common/sigwake.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

static int g_fd = -1;
static volatile sig_atomic_t g_signal;

static void on_signal(int sig)
{
    int saved = errno; /* the handler may interrupt code that reads errno */
    if (!g_signal)
        g_signal = sig;
    uint64_t one = 1;
    ssize_t w = write(g_fd, &one, sizeof one); /* async-signal-safe */
    (void)w;
    errno = saved;
}

int sigwake_install(void)
{
    if (g_fd >= 0)
        return g_fd;
    g_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (g_fd < 0)
        return -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0)
        return -1;
    signal(SIGPIPE, SIG_IGN);
    return g_fd;
}

int sigwake_signal(void)
{
    return g_signal;
}
