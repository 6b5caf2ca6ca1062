/*
** train_mlp.c -- train a 2-layer MLP classifier on generated 3-class
** spirals with autograd, cross-entropy and AdamW. The same program runs
** eagerly or, with TC_COMPILE=1, traced and fused (forward, backward and
** the optimizer step); the losses are bitwise equal (the last line prints
** the final loss's bits).
**
**   train_mlp [steps [hidden]]     (defaults 600, 64)
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "tc.h"

enum { CLASSES = 3, PER_CLASS = 200, N = CLASSES * PER_CLASS };

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static double rss_mb(void)
{
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
      resident = 0;
    fclose(f);
  }
  return resident * (double)sysconf(_SC_PAGESIZE) / (1 << 20);
}

/* Deterministic noise (splitmix64), so every run sees the same data. */
static double noise(uint64_t *s)
{
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53 - 0.5;
}

/* CS231n's spirals: class k's points wind around the origin at angle
** offset 4k, radius growing from 0 to 1. */
static void make_spirals(float *x, int64_t *y)
{
  uint64_t seed = 42;
  for (int k = 0; k < CLASSES; k++)
    for (int i = 0; i < PER_CLASS; i++) {
      double r = (double)i / (PER_CLASS - 1);
      double t = 4.0 * k + 4.0 * r + 0.4 * noise(&seed);
      int row = k * PER_CLASS + i;
      x[2 * row] = (float)(r * sin(t));
      x[2 * row + 1] = (float)(r * cos(t));
      y[row] = k;
    }
}

static double accuracy(tc_tensor *logits, tc_tensor *targets)
{
  size_t mark = tc_scope_begin();
  double hits = 0;
  tc_tensor *pred = tc_argmax(logits, 1, false);
  tc_item(tc_sum_all(tc_eq(pred, targets)), &hits);
  tc_scope_end(mark);
  return hits / N;
}

int main(int argc, char **argv)
{
  int steps = argc > 1 ? atoi(argv[1]) : 600;
  int64_t hidden = argc > 2 ? atoi(argv[2]) : 64;
  if (steps < 1 || hidden < 1) {
    fprintf(stderr, "usage: train_mlp [steps [hidden]]\n");
    return 2;
  }
  static float xs[N * 2];
  static int64_t ys[N];
  make_spirals(xs, ys);
  tc_tensor *x = tc_from_data(TC_F32, TC_SHAPE(N, 2), xs, sizeof xs);
  tc_tensor *y = tc_from_data(TC_I64, TC_SHAPE(N), ys, sizeof ys);

  /* Kaiming-like init: randn * sqrt(2 / fan_in). */
  tc_tensor *w1 = tc_mul_scalar(tc_randn(TC_F32, TC_SHAPE(2, hidden), 1),
                                sqrt(2.0 / 2));
  tc_tensor *b1 = tc_zeros(TC_F32, TC_SHAPE(hidden));
  tc_tensor *w2 = tc_mul_scalar(tc_randn(TC_F32, TC_SHAPE(hidden, CLASSES), 2),
                                sqrt(2.0 / (double)hidden));
  tc_tensor *b2 = tc_zeros(TC_F32, TC_SHAPE(CLASSES));
  tc_tensor *params[] = { w1, b1, w2, b2 };
  for (int i = 0; i < 4; i++)
    if (tc_set_requires_grad(params[i], true) < 0) {
      fprintf(stderr, "error: %s\n", tc_last_error());
      return 1;
    }
  tc_optimizer *opt = tc_adamw(params, 4, 0.01, 0.9, 0.999, 1e-8, 1e-4);

  printf("train_mlp: %d spiral points, 2 -> %lld -> %d, AdamW, %s\n", N,
         (long long)hidden, CLASSES,
         tc_compile_enabled() ? "TC_COMPILE=1" : "eager");
  double loss = 0, t_window = 0;
  int window = 0;
  for (int step = 1; step <= steps; step++) {
    double t0 = now_ms();
    size_t mark = tc_scope_begin();
    tc_optimizer_zero_grad(opt);
    tc_tensor *h = tc_relu(tc_add(tc_matmul(x, w1), b1));
    tc_tensor *logits = tc_add(tc_matmul(h, w2), b2);
    tc_tensor *l = tc_cross_entropy(logits, y);
    if (tc_backward(l) < 0 || tc_optimizer_step(opt) < 0 ||
        tc_item(l, &loss) < 0) {
      fprintf(stderr, "error at step %d: %s\n", step, tc_last_error());
      return 1;
    }
    t_window += now_ms() - t0;
    window++;
    if (step % 50 == 0 || step == 1 || step == steps) {
      /* time per step over the steps since the last line */
      printf("step %4d  loss %.5f  accuracy %5.1f%%  %.3f ms/step\n", step,
             loss, 100 * accuracy(logits, y), t_window / window);
      t_window = 0;
      window = 0;
    }
    if (step == 100 || step == 1000) {
      tc_stats st;
      tc_stats_get(&st);
      printf("memory at step %d: rss %.1f MiB, tc live bytes %llu\n", step,
             rss_mb(), (unsigned long long)st.bytes_allocated);
    }
    tc_scope_end(mark);
  }
  printf("final loss %.9g (bits %a)\n", loss, loss);
  tc_optimizer_free(opt);
  for (int i = 0; i < 4; i++)
    tc_release(params[i]);
  tc_release(x);
  tc_release(y);
  return 0;
}
