/*
** test_random.c -- the differential test: random programs (op DAGs over
** random shapes, broadcasts, views and in-place ops) run eagerly and
** compiled (every region compiled on first sight) must give bitwise equal
** results. TC_RANDOM_PROGRAMS sets how many (default 1000).
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/trace/trace.h"

#define POOL 24

static uint64_t rng;

static uint32_t rnd(uint32_t n)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng % n);
}

typedef struct {
  tc_tensor *v[POOL];
  int n;
  tc_tensor *mut[4];   /* materialized tensors written in place */
  int nmut;
} pool;

static void push(pool *p, tc_tensor *t)
{
  if (!t)
    fail_msg("op failed: %s", tc_last_error());
  if (p->n < POOL)
    p->v[p->n++] = t;
}

static tc_tensor *pick(pool *p) { return p->v[rnd((uint32_t)p->n)]; }

/* A 2-D operand that broadcasts against `like` (same shape, a row, a
** column or a scalar-like 1x1). */
static tc_tensor *pick_compatible(pool *p, tc_tensor *like)
{
  for (int tries = 0; tries < 8; tries++) {
    tc_tensor *t = pick(p);
    if (tc_ndim(t) != tc_ndim(like))
      continue;
    bool ok = true;
    for (int d = 0; d < tc_ndim(t); d++)
      ok &= tc_size(t, d) == tc_size(like, d) || tc_size(t, d) == 1 ||
            tc_size(like, d) == 1;
    if (ok)
      return t;
  }
  return like;
}

static tc_tensor *unary(tc_tensor *a)
{
  switch (rnd(12)) {
  case 0: return tc_neg(a);
  case 1: return tc_abs(a);
  case 2: return tc_exp(tc_clamp(a, -20, 20));
  case 3: return tc_tanh(a);
  case 4: return tc_sigmoid(a);
  case 5: return tc_relu(a);
  case 6: return tc_gelu(a);
  case 7: return tc_silu(a);
  case 8: return tc_sin(a);
  case 9: return tc_sqrt(tc_abs(a));
  case 10: return tc_log(tc_add_scalar(tc_abs(a), 1));
  default: return tc_mul_scalar(a, 0.5 + rnd(8));
  }
}

static tc_tensor *binary(tc_tensor *a, tc_tensor *b)
{
  switch (rnd(7)) {
  case 0: return tc_add(a, b);
  case 1: return tc_sub(a, b);
  case 2: return tc_mul(a, b);
  case 3: return tc_div(a, tc_add_scalar(tc_abs(b), 1));
  case 4: return tc_maximum(a, b);
  case 5: return tc_minimum(a, b);
  default: return tc_where(tc_gt(a, b), a, b);
  }
}

static tc_tensor *reduce(tc_tensor *a)
{
  int d = (int)rnd(2);
  switch (rnd(8)) {
  case 0: return tc_sum(a, d, true);
  case 1: return tc_max(a, d, true);
  case 2: return tc_mean(a, -1, true);
  case 3: return tc_softmax(a, d);
  case 4: return tc_log_softmax(a, -1);
  case 5: return tc_layer_norm(a, NULL, NULL, 1e-5);
  case 6: return tc_min(a, d, true);
  default: return tc_reshape(tc_sum_all(a), TC_SHAPE(1, 1));
  }
}

static tc_tensor *view(tc_tensor *a)
{
  int64_t r = tc_size(a, 0), c = tc_size(a, 1);
  switch (rnd(4)) {
  case 0: return tc_transpose(a, 0, 1);
  case 1: return r > 2 ? tc_slice(a, 0, 1, r, 2) : tc_slice(a, 1, 0, c, 1);
  case 2: return tc_reshape(a, TC_SHAPE(c, r));
  default: return tc_contiguous(tc_transpose(a, 0, 1));
  }
}

static tc_tensor *make_input(tc_dtype dt, int64_t r, int64_t c)
{
  tc_tensor *x = tc_randn(TC_F64, TC_SHAPE(r, c), rng);
  rng += 7;
  tc_tensor *y = tc_cast(x, dt);
  tc_release(x);
  return y;
}

/* One program: inputs, then a chain of random ops; returns a value to
** compare (the in-place targets are compared too). */
static tc_tensor *program(uint64_t seed, pool *p, tc_dtype dt)
{
  rng = seed * 2654435761u + 1;
  static const int64_t sizes[] = { 1, 3, 7, 16, 33 };
  int64_t r = sizes[rnd(5)], c = sizes[rnd(5)];
  size_t mark = tc_scope_begin();
  bool was = tc_compile_enabled();
  tc_compile_set(false);   /* inputs are materialized in both modes */
  push(p, make_input(dt, r, c));
  push(p, make_input(dt, 1, c));
  push(p, make_input(dt, r, 1));
  p->mut[0] = tc_keep(make_input(dt, r, c));
  p->nmut = 1;
  tc_compile_set(was);
  int nops = 3 + (int)rnd(8);
  for (int i = 0; i < nops; i++) {
    tc_tensor *a = pick(p);
    switch (rnd(6)) {
    case 0: push(p, unary(a)); break;
    case 1: push(p, binary(a, pick_compatible(p, a))); break;
    case 2: push(p, reduce(a)); break;
    case 3: push(p, view(a)); break;
    case 4:   /* in place into the materialized target */
      if (tc_ndim(a) == 2 && tc_size(a, 0) * tc_size(a, 1) > 0) {
        tc_tensor *m = p->mut[0];
        tc_tensor *src = pick_compatible(p, m);
        if (tc_size(src, 0) <= tc_size(m, 0) &&
            tc_size(src, 1) <= tc_size(m, 1) &&
            (tc_size(src, 0) == tc_size(m, 0) || tc_size(src, 0) == 1) &&
            (tc_size(src, 1) == tc_size(m, 1) || tc_size(src, 1) == 1))
          assert_int_equal(rnd(2) ? tc_add_(m, src) : tc_mul_(m, src), 0);
        else
          assert_int_equal(tc_mul_scalar_(m, 0.75), 0);
        push(p, tc_add_scalar(m, 1));
      }
      break;
    default: push(p, tc_matmul(a, tc_transpose(a, 0, 1))); break;
    }
  }
  tc_tensor *out = tc_keep(p->v[p->n - 1]);
  tc_scope_end(mark);
  p->n = 0;
  return out;
}

/* Bitwise, except that any NaN equals any NaN (their payloads depend on
** operand order, which compilers choose). */
static bool same_bits(const void *a, const void *b, size_t nb, tc_dtype dt)
{
  if (memcmp(a, b, nb) == 0)
    return true;
  if (dt == TC_F32) {
    const float *x = a, *y = b;
    for (size_t i = 0; i < nb / 4; i++)
      if (memcmp(&x[i], &y[i], 4) != 0 && !(isnan(x[i]) && isnan(y[i])))
        return false;
    return true;
  }
  const double *x = a, *y = b;
  for (size_t i = 0; i < nb / 8; i++)
    if (memcmp(&x[i], &y[i], 8) != 0 && !(isnan(x[i]) && isnan(y[i])))
      return false;
  return true;
}

static void *read_all(tc_tensor *t, size_t *nb)
{
  *nb = (size_t)tc_numel(t) * tc_dtype_size(tc_dtype_of(t));
  void *buf = malloc(*nb + 1);
  assert_int_equal(tc_copy_to(t, buf, *nb), 0);
  return buf;
}

static void test_random_programs(void **state)
{
  (void)state;
  const char *env = getenv("TC_RANDOM_PROGRAMS");
  int n = env ? atoi(env) : 1000;
  int compiled = 0;
  for (int i = 0; i < n; i++) {
    tc_dtype dt = i % 4 == 3 ? TC_F64 : TC_F32;
    pool pe = { .n = 0 }, pc = { .n = 0 };
    tc_compile_set(false);
    tc_tensor *e = program((uint64_t)i, &pe, dt);
    tc_compile_set(true);
    tc_stats s0, s1;
    tc_stats_get(&s0);
    tc_tensor *c = program((uint64_t)i, &pc, dt);
    size_t nbe, nbc, nme, nmc;
    void *be = read_all(e, &nbe), *bc = read_all(c, &nbc);
    assert_int_equal(tc_sync(), 0);
    void *me = read_all(pe.mut[0], &nme), *mc = read_all(pc.mut[0], &nmc);
    tc_stats_get(&s1);
    compiled += s1.regions_compiled > s0.regions_compiled;
    if (nbe != nbc || !same_bits(be, bc, nbe, dt) ||
        !same_bits(me, mc, nme, dt))
      fail_msg("program %d (%s): compiled result differs from eager", i,
               tc_dtype_name(dt));
    free(be);
    free(bc);
    free(me);
    free(mc);
    tc_compile_set(false);
    tc_release(e);
    tc_release(c);
    tc_release(pe.mut[0]);
    tc_release(pc.mut[0]);
  }
  /* Most programs must really have run compiled code. */
  assert_true(compiled >= n * 3 / 4);
  printf("random programs: %d run, %d with compiled regions\n", n, compiled);
}

int main(void)
{
  trace_init();
  cache_configure(&(cache_config){ .hot = 1, .recompile_limit = 8 });
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_random_programs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
