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

/* XCR0 bits the OS sets when it saves the YMM (0x6) / opmask + ZMM (0xe0) state */
static bool os_saves(unsigned mask)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE))
        return false;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & mask) == mask;
}

static _Atomic int g_avx_vnni, g_avx512_vnni;

static bool probe_avx_vnni(void)
{
    unsigned a, b, c, d;
    return cpu_has_avx2_fma_f16c() && os_saves(0x6) && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
}

static bool probe_avx512_vnni(void)
{
    unsigned a, b, c, d;
    if (!cpu_has_avx2_fma_f16c() || !os_saves(0xe6) || !__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return false;
    /* EBX: 16 F, 17 DQ, 30 BW, 31 VL; ECX 11: VNNI */
    unsigned ebx = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);
    return (b & ebx) == ebx && (c & (1u << 11));
}

static bool cached(_Atomic int *slot, bool (*probe)(void))
{
    int v = atomic_load_explicit(slot, memory_order_relaxed);
    if (v == 0) {
        v = probe() ? 2 : 1;
        atomic_store_explicit(slot, v, memory_order_relaxed);
    }
    return v == 2;
}

bool cpu_has_avx_vnni(void) { return cached(&g_avx_vnni, probe_avx_vnni); }
bool cpu_has_avx512_vnni(void) { return cached(&g_avx512_vnni, probe_avx512_vnni); }
#else
bool cpu_has_f16c(void) { return false; }
bool cpu_has_avx2_fma_f16c(void) { return false; }
bool cpu_has_avx_vnni(void) { return false; }
bool cpu_has_avx512_vnni(void) { return false; }
#endif
