/* vec.c — capacity growth of the growable arrays of vec.h. */
#include "common/vec.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

size_t vec_grow_cap(size_t cap, size_t need, size_t min, size_t elem)
{
    if (need <= cap)
        return cap;
    size_t c = cap ? cap : (min ? min : 1);
    while (c < need) {
        if (c > SIZE_MAX / 2) {
            c = need;
            break;
        }
        c *= 2;
    }
    if (elem && c > SIZE_MAX / elem) {
        fprintf(stderr, "vec: %zu elements of %zu bytes overflow the address space\n", c, elem);
        abort();
    }
    return c;
}
