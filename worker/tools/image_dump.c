/* image_dump.c — pagoda-run --dump-image's file (format in image_dump.h). */
#include "worker/tools/image_dump.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/errbuf.h"

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int image_dump_write(const char *path, const image_rgb_t *imgs, int n_img, int32_t nx, int32_t ny,
                     const float *embd, int32_t n_tok, int32_t dim, char *err, size_t errlen)
{
    if (n_img < 1)
        return errbuf_set(err, errlen, "--dump-image: no image to write");
    const uint32_t side = imgs[0].w;
    for (int i = 0; i < n_img; i++)
        if (imgs[i].w != side || imgs[i].h != side)
            return errbuf_set(err, errlen, "--dump-image: image %d is %ux%u, not %ux%u", i, imgs[i].w, imgs[i].h,
                              side, side);
    FILE *f = fopen(path, "wb");
    if (!f)
        return errbuf_set(err, errlen, "--dump-image: cannot create %s: %s", path, strerror(errno));
    uint8_t head[36];
    memcpy(head, IMAGE_DUMP_MAGIC, 8);
    const uint32_t fields[7] = {IMAGE_DUMP_VERSION, (uint32_t)nx, (uint32_t)ny, (uint32_t)n_img, side,
                                (uint32_t)n_tok, (uint32_t)dim};
    for (int i = 0; i < 7; i++)
        put_u32(head + 8 + 4 * i, fields[i]);
    int ok = fwrite(head, 1, sizeof head, f) == sizeof head;
    for (int i = 0; i < n_img && ok; i++)
        ok = fwrite(imgs[i].rgb, 1, (size_t)side * side * 3, f) == (size_t)side * side * 3;
    const size_t n_f = (size_t)n_img * n_tok * dim;
    for (size_t i = 0; i < n_f && ok; i++) { /* little-endian whatever the host */
        uint32_t u;
        uint8_t b[4];
        memcpy(&u, &embd[i], 4);
        put_u32(b, u);
        ok = fwrite(b, 1, 4, f) == 4;
    }
    if (fclose(f) != 0)
        ok = 0;
    return ok ? 0 : errbuf_set(err, errlen, "--dump-image: writing %s failed", path);
}
