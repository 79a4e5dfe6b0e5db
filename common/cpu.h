/* cpu.h — run-time CPU feature checks that both gcc and clang accept.
 *
 * __builtin_cpu_supports covers avx2 and fma in both compilers, but clang 14
 * (Debian 12, used for the fuzz build) rejects "f16c"; F16C is read here from
 * CPUID leaf 1 instead. On other architectures every check is false, and the
 * callers take their portable paths.
 */
#ifndef PAGODA_COMMON_CPU_H
#define PAGODA_COMMON_CPU_H

#include <stdbool.h>

/* AVX and F16C (8-lane float <-> half conversions). */
bool cpu_has_f16c(void);

/* AVX2, FMA and F16C: the set the forward pass's vector kernels use. */
bool cpu_has_avx2_fma_f16c(void);

/* AVX-VNNI (VEX-encoded 256-bit vpdpbusd) with AVX2, FMA and F16C. Intel
 * Alder Lake and later, AMD Zen 5. From CPUID leaf 7 sub-leaf 1, cached. */
bool cpu_has_avx_vnni(void);

/* AVX-512 F, BW, DQ, VL and VNNI with AVX2, FMA and F16C, and an OS that
 * saves the ZMM state (XGETBV). Intel Ice Lake and later, AMD Zen 4 and
 * later. Cached. */
bool cpu_has_avx512_vnni(void);

#endif
