/* cpu.c — see cpu.h. */
#include "common/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <stdatomic.h>

/* CPUID traps to the hypervisor in a VM (microseconds) and the forward pass
 * asks per row: probe once, keep the answer (0 unknown, 1 no, 2 yes). The
 * probe is idempotent, so racing first callers store the same value. */
static _Atomic int g_f16c, g_avx2_fma_f16c;

static bool probe_f16c(void)
{
    unsigned a, b, c, d;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

bool cpu_has_f16c(void)
{
    int v = atomic_load_explicit(&g_f16c, memory_order_relaxed);
    if (v == 0) {
        v = probe_f16c() ? 2 : 1;
        atomic_store_explicit(&g_f16c, v, memory_order_relaxed);
    }
    return v == 2;
}

bool cpu_has_avx2_fma_f16c(void)
{
    int v = atomic_load_explicit(&g_avx2_fma_f16c, memory_order_relaxed);
    if (v == 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c() ? 2 : 1;
        atomic_store_explicit(&g_avx2_fma_f16c, v, memory_order_relaxed);
    }
    return v == 2;
}
#else
bool cpu_has_f16c(void) { return false; }
bool cpu_has_avx2_fma_f16c(void) { return false; }
#endif
