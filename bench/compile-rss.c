/*
** compile-rss.c -- what compiling costs the calling process: N distinct
** regions (one kernel each) are made hot and compiled in turn; prints the
** process's RSS growth per kernel and the compile latency per kernel.
**
** Run as: TC_COMPILE=1 TC_HOT=1 TC_ASYNC=0 TC_CACHE=0 tc-compile-rss [N]
** (the bench sets those itself unless they are already set). Issue 9 saw
** 400 kernels hold 340 MB when libgccjit ran in the process.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tc.h>

/* Resident set of this process in KiB (VmRSS). */
static long rss_kb(void)
{
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "VmRSS:", 6) == 0)
      kb = strtol(line + 6, NULL, 10);
  if (f)
    fclose(f);
  return kb;
}

/* Region i: a chain of 4 steps chosen by i's base-6 digits, on a length
** that also depends on i, so every region is its own structure and kernel. */
static int region(int i)
{
  int64_t n = 1000 + i;
  size_t mark = tc_scope_begin();
  tc_tensor *x = tc_full(TC_F32, TC_SHAPE(n), 0.5 + i * 1e-3);
  tc_tensor *v = x;
  for (int s = 0, d = i; s < 4; s++, d /= 6) {
    switch (d % 6) {
    case 0: v = tc_add_scalar(v, 1.0); break;
    case 1: v = tc_mul(v, x); break;
    case 2: v = tc_exp(v); break;
    case 3: v = tc_tanh(v); break;
    case 4: v = tc_sigmoid(v); break;
    default: v = tc_sub(v, x); break;
    }
  }
  v = tc_add_scalar(v, (double)(i % 7));
  double out;
  int rc = tc_item(tc_sum_all(v), &out);
  tc_scope_end(mark);
  return rc;
}

int main(int argc, char **argv)
{
  int n = argc > 1 ? atoi(argv[1]) : 200;
  setenv("TC_COMPILE", "1", 0);
  setenv("TC_HOT", "1", 0);
  setenv("TC_ASYNC", "0", 0);
  setenv("TC_CACHE", "0", 0);
  tc_compile_set(true);
  /* warm up: the first compile starts whatever the backend starts */
  if (region(0) != 0 || region(0) != 0)
    return 1;
  tc_stats st0, st1;
  tc_stats_get(&st0);
  long before = rss_kb();
  for (int i = 1; i <= n; i++)
    if (region(i) != 0 || region(i) != 0)   /* seen, then hot */
      return 1;
  long after = rss_kb();
  tc_stats_get(&st1);
  uint64_t k = st1.kernels_compiled - st0.kernels_compiled;
  double ms = st1.compile_ms - st0.compile_ms;
  printf("kernels %llu (first %llu), failures %llu\n", (unsigned long long)k,
         (unsigned long long)st0.kernels_compiled,
         (unsigned long long)st1.compile_failures);
  printf("rss before %ld KiB, after %ld KiB: +%.1f MiB, %.1f KiB per kernel\n",
         before, after, (after - before) / 1024.0,
         k ? (double)(after - before) / (double)k : 0.0);
  printf("compile %.1f ms per kernel (first: %.1f ms)\n",
         k ? ms / (double)k : 0.0, st0.compile_ms);
  return 0;
}
