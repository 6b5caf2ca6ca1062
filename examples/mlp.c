/*
** mlp.c -- a small MLP forward loop, the program the README's demo runs.
** Run it plainly for eager mode, or with TC_COMPILE=1 to trace, fuse and
** compile its hot regions; the printed checksum must not change.
**
**   ./mlp [iterations]
*/
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <tc.h>

#define CHECK(x)                                                        \
  do {                                                                  \
    if (!(x)) {                                                         \
      fprintf(stderr, "mlp: %s failed: %s\n", #x, tc_last_error());     \
      exit(1);                                                          \
    }                                                                   \
  } while (0)

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* One layer: y = gelu(x @ w + b), or plain x @ w + b for the last. */
static tc_tensor *layer(tc_tensor *x, tc_tensor *w, tc_tensor *b, bool act)
{
  tc_tensor *y = tc_add(tc_matmul(x, w), b);
  return act ? tc_gelu(y) : y;
}

int main(int argc, char **argv)
{
  int iters = argc > 1 ? atoi(argv[1]) : 20;
  const int64_t batch = 256, d_in = 1024, d_hidden = 4096, d_out = 1024;

  /* Parameters: made in a scope, kept; the scaled-from temporaries go. */
  size_t init = tc_scope_begin();
  tc_tensor *x = tc_keep(tc_randn(TC_F32, TC_SHAPE(batch, d_in), 1));
  tc_tensor *w1 = tc_keep(tc_mul_scalar(
      tc_randn(TC_F32, TC_SHAPE(d_in, d_hidden), 2), 0.03));
  tc_tensor *b1 = tc_keep(tc_zeros(TC_F32, TC_SHAPE(d_hidden)));
  tc_tensor *w2 = tc_keep(tc_mul_scalar(
      tc_randn(TC_F32, TC_SHAPE(d_hidden, d_out), 3), 0.015));
  tc_tensor *b2 = tc_keep(tc_full(TC_F32, TC_SHAPE(d_out), 0.1));
  tc_scope_end(init);
  CHECK(x && w1 && b1 && w2 && b2);

  double checksum = 0, t0 = now_ms(), first = 0;
  for (int it = 0; it < iters; it++) {
    double t = now_ms();
    size_t mark = tc_scope_begin();
    tc_tensor *h = layer(x, w1, b1, true);
    tc_tensor *y = layer(h, w2, b2, false);
    tc_tensor *p = tc_softmax(y, -1);
    tc_tensor *s = tc_sum_all(tc_mul(p, y));
    double v;
    CHECK(tc_item(s, &v) == 0);
    checksum += v;
    tc_scope_end(mark);
    if (it == 0)
      first = now_ms() - t;
  }
  double total = now_ms() - t0;
  tc_stats st;
  tc_stats_get(&st);
  printf("mlp: %d iterations of 256x1024 -> 4096 (gelu) -> 1024 -> softmax\n",
         iters);
  printf("mode: %s, threads: %d\n", tc_compile_enabled() ? "compile" : "eager",
         tc_threads());
  printf("first iteration %.2f ms, mean of the rest %.2f ms\n", first,
         iters > 1 ? (total - first) / (iters - 1) : first);
  printf("checksum %.9g\n", checksum);
  printf("ops %llu, kernels launched %llu, regions %llu, compiled kernels "
         "%llu\n", (unsigned long long)st.ops,
         (unsigned long long)st.kernels_launched,
         (unsigned long long)st.regions,
         (unsigned long long)st.kernels_compiled);
  tc_release(x);
  tc_release(w1);
  tc_release(b1);
  tc_release(w2);
  tc_release(b2);
  return 0;
}
