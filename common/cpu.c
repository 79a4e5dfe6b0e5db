/* cpu.c — see cpu.h. */
#include "common/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* CPUID traps to the hypervisor in a VM (microseconds) and the forward pass
 * asks per row: probe once, keep the answer (0 unknown, 1 no, 2 yes). The
 * probe is idempotent, so racing first callers store the same value. */
static _Atomic int g_f16c, g_avx2_fma_f16c, g_avx_vnni, g_avx512_vnni, g_avx512_bf16;

static bool cached(_Atomic int *slot, bool (*probe)(void))
{
    int v = atomic_load_explicit(slot, memory_order_relaxed);
    if (v == 0) {
        v = probe() ? 2 : 1;
        atomic_store_explicit(slot, v, memory_order_relaxed);
    }
    return v == 2;
}

/* XCR0: which register states the OS saves on a context switch. */
static uint64_t xcr0(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE))
        return 0;
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

static bool probe_f16c(void)
{
    unsigned a, b, c, d;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

static bool probe_avx2_fma_f16c(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c() &&
           (xcr0() & 0x6) == 0x6; /* SSE and YMM state */
}

/* leaf 7 sub-leaf 1 EAX: bit 4 AVX-VNNI, bit 5 AVX512-BF16 */
static unsigned leaf7_1_eax(void)
{
    unsigned a = 0, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7)
        return 0;
    __cpuid_count(7, 1, a, b, c, d);
    return a;
}

static bool probe_avx_vnni(void)
{
    return cpu_has_avx2_fma_f16c() && (leaf7_1_eax() & (1u << 4));
}

static bool probe_avx512_vnni(void)
{
    unsigned a, b, c, d;
    if (!cpu_has_avx2_fma_f16c() || __get_cpuid_max(0, NULL) < 7)
        return false;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned need_b = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31); /* F, DQ, BW, VL */
    return (b & need_b) == need_b && (c & (1u << 11)) /* AVX512_VNNI */ &&
           (xcr0() & 0xe6) == 0xe6; /* SSE, YMM, opmask, ZMM 0-15 upper halves, ZMM 16-31 */
}

static bool probe_avx512_bf16(void)
{
    return cpu_has_avx512_vnni() && (leaf7_1_eax() & (1u << 5));
}

bool cpu_has_f16c(void) { return cached(&g_f16c, probe_f16c); }
bool cpu_has_avx2_fma_f16c(void) { return cached(&g_avx2_fma_f16c, probe_avx2_fma_f16c); }
bool cpu_has_avx_vnni(void) { return cached(&g_avx_vnni, probe_avx_vnni); }
bool cpu_has_avx512_vnni(void) { return cached(&g_avx512_vnni, probe_avx512_vnni); }
bool cpu_has_avx512_bf16(void) { return cached(&g_avx512_bf16, probe_avx512_bf16); }
#else
bool cpu_has_f16c(void) { return false; }
bool cpu_has_avx2_fma_f16c(void) { return false; }
bool cpu_has_avx_vnni(void) { return false; }
bool cpu_has_avx512_vnni(void) { return false; }
bool cpu_has_avx512_bf16(void) { return false; }
#endif
