/* cpu.h — run-time CPU feature checks that both gcc and clang accept.
 *
 * __builtin_cpu_supports covers avx2 and fma in both compilers, but clang 14
 * (Debian 12, used for the fuzz build) rejects "f16c" and knows neither
 * "avxvnni" nor "avx512bf16"; those are read here from CPUID (leaf 1 ECX for
 * F16C, leaf 7 sub-leaf 0 EBX/ECX and sub-leaf 1 EAX for the AVX-512 and
 * VNNI bits) together with XGETBV, so a feature counts only when the OS
 * also saves the registers it uses (YMM state for AVX, opmask and ZMM state
 * for AVX-512). Every answer is probed once and cached. On other
 * architectures every check is false, and the callers take their portable
 * paths.
 */
#ifndef PAGODA_COMMON_CPU_H
#define PAGODA_COMMON_CPU_H

#include <stdbool.h>

/* AVX and F16C (8-lane float <-> half conversions). */
bool cpu_has_f16c(void);

/* AVX2, FMA and F16C: the set the forward pass's vector kernels use. */
bool cpu_has_avx2_fma_f16c(void);

/* AVX-VNNI (VEX-encoded 256-bit vpdpbusd, `_mm256_dpbusd_avx_epi32`)
 * together with AVX2, FMA and F16C. Intel Alder Lake and later, AMD Zen 5. */
bool cpu_has_avx_vnni(void);

/* AVX-512 F, BW, DQ, VL and VNNI (512-bit vpdpbusd) together with AVX2,
 * FMA and F16C, and an OS that saves the ZMM state. Intel Ice Lake and
 * later, AMD Zen 4 and later. */
bool cpu_has_avx512_vnni(void);

/* cpu_has_avx512_vnni() plus AVX512-BF16 (vdpbf16ps, vcvtne2ps2bf16).
 * Intel Cooper Lake / Sapphire Rapids, AMD Zen 4 and later. */
bool cpu_has_avx512_bf16(void);

/* AMX-TILE and AMX-INT8 (tile registers, tdpbssd / tdpbsud): CPUID leaf 7
 * EDX bits 24 and 25, XCR0 bits 17 and 18 (the OS enables XTILECFG and
 * XTILEDATA) and, on Linux, this process's permission to use the 8 KB
 * tile state: the first call asks the kernel once with
 * arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) and confirms it with
 * ARCH_GET_XCOMP_PERM (the permission covers every thread of the process,
 * also those started later). A denied request logs one warning line and the
 * answer is false (the callers fall back to AVX-512 VNNI). Intel Sapphire
 * Rapids and later; no AMD CPU so far. */
bool cpu_has_amx_int8(void);

/* AMX-BF16 (tdpbf16ps), CPUID leaf 7 EDX bit 22, with cpu_has_amx_int8(). */
bool cpu_has_amx_bf16(void);

/* Why cpu_has_amx_int8() is false, for skip messages and logs: e.g.
 * "cpuid leaf 7 edx: no AMX-TILE/AMX-INT8"; "" when it is true. A static
 * string; probes like cpu_has_amx_int8(). */
const char *cpu_amx_why_not(void);

#endif
