/* vision_idefics3.c — the Idefics3 pixel shuffle (see vision_idefics3.h). */
#include "worker/model/vision_idefics3.h"

#include <assert.h>
#include <stddef.h>
#include <string.h>

void vision_idefics3_shuffle(const float *x, int32_t n_side, int32_t dim, int32_t k, float *y)
{
    assert(k > 0 && n_side % k == 0);
    const int32_t side = n_side / k;
    const size_t D = (size_t)dim;
    for (int32_t oy = 0; oy < side; oy++)
        for (int32_t ox = 0; ox < side; ox++) {
            float *row = y + ((size_t)oy * side + ox) * D * (size_t)k * k;
            for (int32_t dy = 0; dy < k; dy++)
                for (int32_t dx = 0; dx < k; dx++) {
                    const float *src = x + ((size_t)(oy * k + dy) * n_side + (size_t)(ox * k + dx)) * D;
                    memcpy(row + ((size_t)dy * k + dx) * D, src, D * sizeof(float));
                }
        }
}
