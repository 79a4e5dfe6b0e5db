/* attention_q8.h — the two kernels of attention over a Q8_0 KV cache
 * (kv_store.h's layout: per K/V vector, int8 quants then f16 block scales),
 * one implementation per instruction set, each bit-identical to the scalar
 * one (tests/worker/kernels/test_attention_q8.c runs every path the CPU
 * has). One call takes up to ATTQ8_MAX_HEADS query heads sharing a kv head
 * (a whole GQA group), so each K and V element is read and converted once
 * per group.
 *
 * Scores. The queries are quantized like K (attention_q8_quantize_q: blocks
 * of qb = kv->qblock elements, float scale qd = amax/127, int8 quants in
 * [-127, 127]); per (head h, position t) and block b the integer dot
 *     isum_b = Σ_i qq_h[b*qb + i] * kq_t[b*qb + i]          (exact int32)
 * is what differs by ISA, then, in this order with these IEEE operations on
 * every path (lane-wise, one lane per position, in the vector ones),
 *     p_b = (qd_h[b] * kd_t[b]) * (float)isum_b
 *     s   = ((p_0 + p_1) + p_2) + ...        sc[h*ld + t - t0] = s * scale
 * The vector paths (qb == 32; smaller blocks, head_dim 8 or 16, take the
 * scalar dot) load a group of positions' K slices once, transpose them to
 * dword columns (lane u = position u) and, per head, multiply each column
 * with one broadcast query dword: avx512vnni with head_dim % 64 == 0,
 * 16 positions x 64 bytes per 16x16 transpose and 512-bit vpdpbusd on
 * k ^ 0x80 (= k + 128, the unsigned operand; the sum starts at -128 Σ q);
 * otherwise 8 positions x 32 bytes per 8x8 transpose, 256-bit vpdpbusd
 * (AVX-VNNI, AVX512-VNNI) likewise, or AVX2 maddubs on |q| and sign(k, q).
 * The K and V slices are prefetched 64 positions ahead.
 *
 * Values. out_h[i] = (Σ_t fma(w_h[t], vd_t[b(i)] * (float)vq_t[i], ·)) * inv[h],
 * the sum over t in order with one fused multiply-add per term (fmaf in the
 * scalar path; 8 heads x 32 outputs per pass on avx512vnni, 8 heads x 8 or
 * 4 x 16 on the other vector ISAs; the product d * q is exact in float for
 * |q| <= 127 and an f16 d anyway, and each position's slice is converted
 * once per pass for all the pass's heads): the same bits.
 *
 * Nothing is allocated; no state but the ISA choice (process-wide, read
 * from qgemm_isa_default() unless a test sets it).
 */
#ifndef PAGODA_WORKER_KERNELS_ATTENTION_Q8_H
#define PAGODA_WORKER_KERNELS_ATTENTION_Q8_H

#include <stddef.h>
#include <stdint.h>

#include "worker/kernels/qgemm.h"
#include "worker/kernels/kv_store.h"

/* Largest head_dim the Q8 kernels take (stack scratch); asserted. */
#define ATTQ8_MAX_HEAD_DIM 512
/* Most query heads one scores / values call takes (a GQA group: 8 at the
 * 1.1B shape); asserted. */
#define ATTQ8_MAX_HEADS 16

/* qq (nh * hd int8) and qd (nh * hd / qb floats) from q (nh * hd floats). */
void attention_q8_quantize_q(const float *q, int nh, int hd, int qb, int8_t *qq, float *qd);

/* sc[h*ld + t - t0] for heads h < nh and positions t0 <= t < t1 of the kv
 * head slice starting at element kvo (a multiple of qb), with quantized
 * queries qq / qd (attention_q8_quantize_q of nh heads). */
void attention_q8_scores(qgemm_isa_t isa, const int8_t *qq, const float *qd, int nh, const kv_store_t *kv, int l,
                         const int32_t *bt, int t0, int t1, int kvo, int hd, float scale, float *sc, size_t ld);

/* out[h*hd + i] = Σ_t w[h*ld + t - t0] · v_t[kvo + i] · inv[h] (see above). */
void attention_q8_values(qgemm_isa_t isa, const float *w, size_t ld, int nh, const float *inv, const kv_store_t *kv,
                         int l, const int32_t *bt, int t0, int t1, int kvo, int hd, float *out);

/* The ISA the attention uses (never QGEMM_ISA_AUTO nor QGEMM_ISA_AMX,
 * which runs the AVX512VNNI kernels here): qgemm_isa_default() unless
 * attention_q8_set_isa chose one. */
qgemm_isa_t attention_q8_isa(void);

/* Test hook: run isa (QGEMM_ISA_AUTO: back to the default). 0 ok, -1 the
 * CPU lacks it. Not thread-safe against running attention. */
int attention_q8_set_isa(qgemm_isa_t isa);

#endif
