/* clock.h — time helpers. Monotonic time for durations and deadlines, wall
 * time only for what users see (OpenAI `created` fields, log stamps).
 * Units are in the names: _us microseconds, _ms milliseconds, _s seconds. */
#ifndef PAGODA_COMMON_CLOCK_H
#define PAGODA_COMMON_CLOCK_H

#include <stdint.h>

int64_t clock_now_us(void);      /* CLOCK_MONOTONIC */
int64_t clock_wall_s(void);      /* seconds since the Unix epoch */
void clock_sleep_us(int64_t us);

#endif
