/*
** guard-bench.c -- what a compiled region's guard check costs: guard_check
** over sets of 1..16 inputs (rank 2 and 4), median ns per input. The check
** runs on every realization of a compiled region (principle 4: tens of
** nanoseconds per input, not microseconds).
*/
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../src/guards/guards.h"

static double now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(void)
{
  const int counts[] = { 1, 4, 16 };
  const int ranks[] = { 2, 4 };
  printf("guard check (static guards: dtype, rank, sizes, strides, "
         "aliasing)\n");
  for (int r = 0; r < 2; r++)
    for (int c = 0; c < 3; c++) {
      int n = counts[c], nd = ranks[r];
      tc_tensor *ts[16];
      int64_t shape[4] = { 64, 32, 16, 8 };
      for (int i = 0; i < n; i++)
        ts[i] = tensor_new(TC_F32, nd, shape);
      guard_set *g = guard_build(n, (const tc_tensor *const *)ts, false);
      double med[15];
      const int iters = 200000;
      for (int s = 0; s < 15; s++) {
        double t0 = now_ns();
        int ok = 0;
        for (int k = 0; k < iters; k++)
          ok += guard_check(g, n, (const tc_tensor *const *)ts);
        double t = (now_ns() - t0) / iters;
        if (ok != iters)
          return 1;
        med[s] = t / n;
      }
      qsort(med, 15, sizeof med[0], cmp);
      printf("  %2d inputs of rank %d: %6.1f ns per input (median of 15)\n",
             n, nd, med[7]);
      guard_free(g);
      for (int i = 0; i < n; i++)
        tensor_unref(ts[i]);
    }
  return 0;
}
