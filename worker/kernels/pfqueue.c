/* pfqueue.c — the per-thread prefetch queue (pfqueue.h). Its own object so
 * that every kernel that calls pfq_step or pfq_self (qgemm.c, qkpack.c)
 * links against one definition whatever else a program links. */
#include "worker/kernels/pfqueue.h"

_Thread_local pfq_t pfq_tls;

pfq_t *pfq_self(void)
{
    return &pfq_tls;
}
