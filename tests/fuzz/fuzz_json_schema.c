/* libFuzzer target for common/grammar/json_schema: arbitrary bytes as a JSON
 * Schema. json_schema_check parses the JSON, compiles the schema subset to
 * GBNF and parses the GBNF; any failure must come back as -1 with a message. */
#include <stdint.h>
#include <stdlib.h>

#include "common/grammar/json_schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    err[0] = 0;
    if (json_schema_check(data, size, err, sizeof err) != 0 && err[0] == 0)
        abort();
    return 0;
}
