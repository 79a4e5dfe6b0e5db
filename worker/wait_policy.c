/* wait_policy.c — a bounded OpenMP spin by re-executing (see wait_policy.h). */
#include "worker/wait_policy.h"

#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

int wait_policy_reexec(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT"))
        return 0;
    if (setenv("GOMP_SPINCOUNT", WAIT_POLICY_SPINCOUNT, 1) != 0)
        return -1;
    /* exec the resolved path, not /proc/self/exe: the kernel names the
     * process after the file it executes, and ps/top/systemd should show
     * "pagoda-worker", not "exe" */
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        execv(self, argv);
    }
    execv("/proc/self/exe", argv);
    return -1;
}
