/* sigwake.h — turn SIGINT/SIGTERM into a readable file descriptor.
 *
 * Why not sigwait()/signalfd(): both need the signals blocked in *every*
 * thread, and libraries start threads before main() runs (OpenBLAS's pool is
 * created by a constructor), so a process-directed signal can land on a
 * thread that never blocked it and kill the process with the default action.
 * A handler that only writes to an eventfd works whichever thread runs it.
 *
 * sigwake_install() returns that eventfd; it becomes readable at the first
 * SIGINT or SIGTERM and stays readable. Poll it next to sockets; do not read
 * or close it. SIGPIPE is ignored as well (sockets report EPIPE instead). */
#ifndef PAGODA_COMMON_SIGWAKE_H
#define PAGODA_COMMON_SIGWAKE_H

/* Installs the handlers (once per process); returns the fd, or -1 (errno). */
int sigwake_install(void);
/* The signal received, 0 if none yet. */
int sigwake_signal(void);

#endif
