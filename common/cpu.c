/* cpu.c — see cpu.h. */
#include "common/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"

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

/* ---- AMX ------------------------------------------------------------------ */

#define ARCH_GET_XCOMP_PERM 0x1022 /* asm/prctl.h, Linux 5.16 */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* The AMX probe runs once per process (pthread_once): it may ask the kernel
 * for the tile permission and log, and it writes the reason below. */
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;
static bool g_amx_int8;
static char g_amx_why[160]; /* "" when AMX is usable */

static void amx_why(const char *s) { snprintf(g_amx_why, sizeof g_amx_why, "%s", s); }

/* leaf 7 sub-leaf 0 EDX: bit 22 AMX-BF16, 24 AMX-TILE, 25 AMX-INT8 */
static unsigned leaf7_0_edx(void)
{
    unsigned a, b, c, d = 0;
    if (__get_cpuid_max(0, NULL) < 7)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return d;
}

/* The process may use XTILEDATA: asks once (the caller caches the answer).
 * A kernel before 5.16 has no such arch_prctl and no AMX support either. */
static bool amx_permission(void)
{
#ifdef __linux__
    unsigned long mask = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &mask) == 0 && (mask & (1ul << XFEATURE_XTILEDATA)))
        return true;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        char buf[160];
        snprintf(buf, sizeof buf, "arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) denied: %s", strerror(errno));
        amx_why(buf);
        log_warn("AMX: %s; using the AVX-512 kernels", buf);
        return false;
    }
    mask = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &mask) != 0 || !(mask & (1ul << XFEATURE_XTILEDATA))) {
        amx_why("arch_prctl(ARCH_GET_XCOMP_PERM): XTILEDATA not granted");
        log_warn("AMX: XTILEDATA permission not granted; using the AVX-512 kernels");
        return false;
    }
    return true;
#else
    amx_why("no way to request the tile state on this OS");
    return false;
#endif
}

static bool probe_amx_int8(void)
{
    const unsigned need = (1u << 24) | (1u << 25); /* AMX-TILE, AMX-INT8 */
    unsigned d = leaf7_0_edx();
    if ((d & need) != need) {
        char buf[160];
        snprintf(buf, sizeof buf, "cpuid leaf 7 edx=0x%08x: no AMX-TILE/AMX-INT8 (bits 24, 25)", d);
        amx_why(buf);
        return false;
    }
    const uint64_t tiles = (1ull << 17) | (1ull << 18); /* XTILECFG, XTILEDATA */
    if ((xcr0() & tiles) != tiles) {
        amx_why("XCR0: the OS does not enable XTILECFG/XTILEDATA (bits 17, 18)");
        return false;
    }
    if (!amx_permission())
        return false;
    amx_why("");
    return true;
}

static void amx_init(void) { g_amx_int8 = probe_amx_int8(); }

bool cpu_has_amx_int8(void)
{
    pthread_once(&g_amx_once, amx_init);
    return g_amx_int8;
}

bool cpu_has_amx_bf16(void) { return cpu_has_amx_int8() && (leaf7_0_edx() & (1u << 22)); }

const char *cpu_amx_why_not(void)
{
    pthread_once(&g_amx_once, amx_init);
    return g_amx_why;
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
bool cpu_has_amx_int8(void) { return false; }
bool cpu_has_amx_bf16(void) { return false; }
const char *cpu_amx_why_not(void) { return "not an x86 CPU"; }
#endif
