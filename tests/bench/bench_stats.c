/* bench_stats.c — percentiles and means of latency samples (see bench_stats.h). */
#include "tests/bench/bench_stats.h"

#include <math.h>
#include <stdlib.h>

double bench_stats_percentile(const double *sorted, size_t n, double p)
{
    if (n == 0)
        return 0.0;
    if (p <= 0)
        return sorted[0];
    if (p >= 100)
        return sorted[n - 1];
    double r = p / 100.0 * (double)(n - 1);
    size_t lo = (size_t)floor(r);
    if (lo + 1 >= n)
        return sorted[n - 1];
    double frac = r - (double)lo;
    return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

bench_summary_t bench_stats_summarize(double *vals, size_t n)
{
    bench_summary_t s = { 0 };
    if (n == 0)
        return s;
    qsort(vals, n, sizeof *vals, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += vals[i];
    s.n = n;
    s.mean = sum / (double)n;
    s.min = vals[0];
    s.max = vals[n - 1];
    s.p50 = bench_stats_percentile(vals, n, 50);
    s.p90 = bench_stats_percentile(vals, n, 90);
    s.p99 = bench_stats_percentile(vals, n, 99);
    return s;
}
