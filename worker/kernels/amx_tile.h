/* amx_tile.h — the AMX tile configuration and a scalar emulation of the
 * tile operations qgemm's AMX kernel uses (qgemm_amx.inc).
 *
 * AMX (Intel Sapphire Rapids and later) has 8 tile registers tmm0..tmm7 of
 * up to 16 rows × 64 bytes. A 64-byte configuration (ldtilecfg, palette 1)
 * gives each tile its rows and bytes per row (colsb); a load (tileloadd)
 * reads `rows` rows of `colsb` bytes at base + r · stride and zeroes the
 * rest of the register; a store (tilestored) writes them back. The int8
 * products C += A · B (tdpbssd: A and B signed; tdpbsud: A signed, B
 * unsigned) take
 *     A  M rows × 4K bytes (row m: K groups of 4 consecutive int8 values)
 *     B  K rows × 4N bytes (row k: for each of N columns the 4 values that
 *        meet A's group k: the "VNNI" layout)
 *     C  M rows × N int32
 * and compute C[m][n] += Σ_{k<K} Σ_{i<4} A[m][4k+i] · B[k][4n+i], exact in
 * int32 (wrapping on overflow, which qgemm's ranges never reach). Shapes
 * must agree (A.colsb = 4 · B.rows, A.rows = C.rows, B.colsb = C.colsb),
 * otherwise the CPU raises #UD; the emulation aborts instead.
 *
 * The emulation (amx_emu_*) is the same data flow in portable C, state in
 * an amx_emu_t instead of the registers, so the kernel's packing and
 * blocking run and are tested on any CPU (qgemm_set_amx_emulated). */
#ifndef PAGODA_WORKER_AMX_TILE_H
#define PAGODA_WORKER_AMX_TILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AMX_TILES 8
#define AMX_MAX_ROWS 16
#define AMX_MAX_COLSB 64

/* The ldtilecfg memory operand, palette 1 (64 bytes; unused tiles 0). */
typedef struct {
    uint8_t palette;     /* 1 */
    uint8_t start_row;   /* 0 (restart point after a fault) */
    uint8_t reserved[14];
    uint16_t colsb[16];  /* bytes per row of tile i (i < 8), ≤ 64 */
    uint8_t rows[16];    /* rows of tile i, ≤ 16 */
} amx_tilecfg_t;
_Static_assert(sizeof(amx_tilecfg_t) == 64, "ldtilecfg takes 64 bytes");

/* Emulated tile state: the configuration and 8 tiles of 16 × 64 bytes. */
typedef struct {
    amx_tilecfg_t cfg;
    uint8_t t[AMX_TILES][AMX_MAX_ROWS][AMX_MAX_COLSB];
} amx_emu_t;

static inline void amx_emu_fail(const char *what, int t)
{
    fprintf(stderr, "amx emulation: %s (tile %d): the CPU would raise #UD\n", what, t);
    abort();
}

static inline void amx_emu_config(amx_emu_t *e, const amx_tilecfg_t *cfg)
{
    if (cfg->palette != 1)
        amx_emu_fail("palette is not 1", -1);
    for (int i = 0; i < AMX_TILES; i++)
        if (cfg->rows[i] > AMX_MAX_ROWS || cfg->colsb[i] > AMX_MAX_COLSB)
            amx_emu_fail("tile larger than 16 rows x 64 bytes", i);
    e->cfg = *cfg;
    memset(e->t, 0, sizeof e->t);
}

static inline void amx_emu_check(const amx_emu_t *e, int t)
{
    if (t < 0 || t >= AMX_TILES || e->cfg.rows[t] == 0 || e->cfg.colsb[t] == 0)
        amx_emu_fail("tile not configured", t);
}

static inline void amx_emu_load(amx_emu_t *e, int t, const void *base, size_t stride)
{
    amx_emu_check(e, t);
    memset(e->t[t], 0, sizeof e->t[t]);
    for (int r = 0; r < e->cfg.rows[t]; r++)
        memcpy(e->t[t][r], (const uint8_t *)base + (size_t)r * stride, e->cfg.colsb[t]);
}

static inline void amx_emu_store(const amx_emu_t *e, int t, void *base, size_t stride)
{
    amx_emu_check(e, t);
    for (int r = 0; r < e->cfg.rows[t]; r++)
        memcpy((uint8_t *)base + (size_t)r * stride, e->t[t][r], e->cfg.colsb[t]);
}

static inline void amx_emu_zero(amx_emu_t *e, int t)
{
    amx_emu_check(e, t);
    memset(e->t[t], 0, sizeof e->t[t]);
}

/* C[c] += A[a] · B[b]; a_signed / b_signed pick tdpbssd (1, 1) or
 * tdpbsud (1, 0). Sums wrap modulo 2^32 like the instruction's. */
static inline void amx_emu_dp(amx_emu_t *e, int c, int a, int b, int a_signed, int b_signed)
{
    amx_emu_check(e, c);
    amx_emu_check(e, a);
    amx_emu_check(e, b);
    const int M = e->cfg.rows[c], N = e->cfg.colsb[c] / 4, K = e->cfg.colsb[a] / 4;
    if (e->cfg.colsb[c] % 4 || e->cfg.colsb[a] % 4 || e->cfg.rows[a] != M || e->cfg.rows[b] != K ||
        e->cfg.colsb[b] != e->cfg.colsb[c] || c == a || c == b || a == b)
        amx_emu_fail("tile shapes do not agree", c);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            int32_t cv;
            memcpy(&cv, &e->t[c][m][4 * n], 4);
            uint32_t acc = (uint32_t)cv;
            for (int k = 0; k < K; k++)
                for (int i = 0; i < 4; i++) {
                    uint8_t ua = e->t[a][m][4 * k + i], ub = e->t[b][k][4 * n + i];
                    int va = a_signed ? (int)(int8_t)ua : (int)ua, vb = b_signed ? (int)(int8_t)ub : (int)ub;
                    acc += (uint32_t)(va * vb);
                }
            cv = (int32_t)acc;
            memcpy(&e->t[c][m][4 * n], &cv, 4);
        }
}

#endif
