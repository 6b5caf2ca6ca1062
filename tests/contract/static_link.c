/*
** static_link.c -- a program linked with the static libtc.a the plain way
** (no --whole-archive), run with TC_COMPILE=1: tracing must come with it.
** (It used to register itself from a constructor in an object nothing
** referenced, which a static link drops: the program then ran eagerly.)
*/
#include <stdio.h>

#include <tc.h>

int main(void)
{
  double total = 0;
  for (int it = 0; it < 3; it++) {
    size_t mark = tc_scope_begin();
    tc_tensor *x = tc_full(TC_F32, TC_SHAPE(4, 8), 0.5);
    tc_tensor *y = tc_sum_all(tc_mul(tc_add_scalar(x, 1.0), x));
    double v;
    if (tc_item(y, &v) != 0) {
      fprintf(stderr, "static_link: %s\n", tc_last_error());
      return 1;
    }
    total += v;
    tc_scope_end(mark);
  }
  tc_stats s;
  tc_stats_get(&s);
  int ok = total == 3 * 32 * 0.75 && tc_compile_enabled() && s.regions >= 3
           && s.regions_compiled >= 1;
  printf("static_link: total %g, regions %llu (compiled %llu): %s\n", total,
         (unsigned long long)s.regions,
         (unsigned long long)s.regions_compiled, ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}
