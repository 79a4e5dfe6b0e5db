/* ggml_type.c — the block geometry and names of ggml tensor types (see
 * ggml_type.h). */
#include "common/text/ggml_type.h"

#include <stddef.h>

/* Block geometry of every ggml type we know, by ggml numbering. Sizes are the
 * packed block structs (fp16 scales are 2 bytes):
 *   Q4_0  d + 16 nibble bytes                      = 18 bytes / 32
 *   Q4_1  d, m + 16                                = 20 bytes / 32
 *   Q5_0  d + qh[4] + qs[16]                       = 22 bytes / 32
 *   Q5_1  d, m + qh[4] + qs[16]                    = 24 bytes / 32
 *   Q8_0  d + 32 int8                              = 34 bytes / 32
 *   Q8_1  d, s + 32 int8                           = 36 bytes / 32
 *   Q2_K  scales[16] qs[64] d dmin                 = 84 bytes / 256
 *   Q3_K  hmask[32] qs[64] scales[12] d            = 110 bytes / 256
 *   Q4_K  d dmin scales[12] qs[128]                = 144 bytes / 256
 *   Q5_K  d dmin scales[12] qh[32] qs[128]         = 176 bytes / 256
 *   Q6_K  ql[128] qh[64] scales[16] d              = 210 bytes / 256
 *   Q8_K  f32 d, qs[256], i16 bsums[16]            = 292 bytes / 256 */
static const struct {
    uint32_t type;
    const char *name;
    uint32_t block_elems;
    uint32_t block_bytes;
} type_facts[] = {
    {GGML_TYPE_F32, "F32", 1, 4},     {GGML_TYPE_F16, "F16", 1, 2},
    {GGML_TYPE_Q4_0, "Q4_0", 32, 18}, {GGML_TYPE_Q4_1, "Q4_1", 32, 20},
    {GGML_TYPE_Q5_0, "Q5_0", 32, 22}, {GGML_TYPE_Q5_1, "Q5_1", 32, 24},
    {GGML_TYPE_Q8_0, "Q8_0", 32, 34}, {GGML_TYPE_Q8_1, "Q8_1", 32, 36},
    {GGML_TYPE_Q2_K, "Q2_K", 256, 84}, {GGML_TYPE_Q3_K, "Q3_K", 256, 110},
    {GGML_TYPE_Q4_K, "Q4_K", 256, 144}, {GGML_TYPE_Q5_K, "Q5_K", 256, 176},
    {GGML_TYPE_Q6_K, "Q6_K", 256, 210}, {GGML_TYPE_Q8_K, "Q8_K", 256, 292},
    {GGML_TYPE_BF16, "BF16", 1, 2},
};
#define N_TYPE_FACTS (sizeof type_facts / sizeof type_facts[0])

static int type_index(uint32_t type)
{
    for (size_t i = 0; i < N_TYPE_FACTS; i++)
        if (type_facts[i].type == type)
            return (int)i;
    return -1;
}

uint32_t ggml_type_block_elems(uint32_t type)
{
    int i = type_index(type);
    return i < 0 ? 0 : type_facts[i].block_elems;
}

uint32_t ggml_type_block_bytes(uint32_t type)
{
    int i = type_index(type);
    return i < 0 ? 0 : type_facts[i].block_bytes;
}

const char *ggml_type_name(uint32_t type)
{
    int i = type_index(type);
    return i < 0 ? "unknown" : type_facts[i].name;
}

bool ggml_type_supported(uint32_t type)
{
    switch (type) {
    case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16:
    case GGML_TYPE_Q8_0: case GGML_TYPE_Q4_0:
    case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K:
        return true;
    default:
        return false;
    }
}
