/* bench_stats.h — summary statistics of latency samples for pagoda-bench.
 *
 * Percentiles use linear interpolation between the two nearest order
 * statistics (the same definition as numpy.percentile's default): for sorted
 * samples x[0..n-1] and percent p, rank r = p/100 * (n-1), result
 * x[floor r] + (r - floor r) * (x[floor r + 1] - x[floor r]).
 */
#ifndef PAGODA_BENCH_STATS_H
#define PAGODA_BENCH_STATS_H

#include <stddef.h>

typedef struct bench_summary {
    size_t n;        /* number of samples; all other fields are 0 when n == 0 */
    double mean;
    double min, max;
    double p50, p90, p99;
} bench_summary_t;

/* Percentile p (0..100) of n samples already sorted ascending; 0 when n == 0. */
double bench_stats_percentile(const double *sorted, size_t n, double p);

/* Sorts vals (n samples, any unit) in place and summarises them. */
bench_summary_t bench_stats_summarize(double *vals, size_t n);

#endif
