/*
** contract.c -- a program written only against the public contract
** (DESIGN.md), compiled and linked through the installed tc.pc by
** tests/run-all.sh. Every expected value is worked out by hand.
*/
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <tc.h>

static int fails;

#define EXPECT(c)                                                      \
  do {                                                                 \
    if (!(c)) {                                                        \
      fprintf(stderr, "contract: %s:%d: %s (last error: %s)\n",        \
              __FILE__, __LINE__, #c, tc_last_error());                \
      fails++;                                                         \
    }                                                                  \
  } while (0)

static double at(tc_tensor *t, int i)
{
  double v[64];
  if (tc_numel(t) > 64 || tc_dtype_of(t) != TC_F64) {
    tc_tensor *c = tc_cast(t, TC_F64);
    double r = tc_copy_to(c, v, sizeof(double) * (size_t)tc_numel(c)) == 0
               ? v[i] : NAN;
    tc_release(c);
    return r;
  }
  return tc_copy_to(t, v, sizeof(double) * (size_t)tc_numel(t)) == 0 ? v[i]
                                                                      : NAN;
}

int main(void)
{
  size_t mark = tc_scope_begin();

  /* Creation and broadcasting: (2,3) + (3) */
  const float a_data[] = { 1, 2, 3, 4, 5, 6 };
  tc_tensor *a = tc_from_data(TC_F32, TC_SHAPE(2, 3), a_data, sizeof a_data);
  tc_tensor *row = tc_arange(TC_F32, 10, 40, 10);        /* 10 20 30 */
  tc_tensor *s = tc_add(a, row);
  EXPECT(tc_ndim(s) == 2 && tc_size(s, 0) == 2 && tc_size(s, 1) == 3);
  EXPECT(at(s, 0) == 11 && at(s, 5) == 36);

  /* Views: transpose and slice share storage, no copy. */
  tc_tensor *t = tc_transpose(a, 0, 1);                  /* (3,2) */
  EXPECT(!tc_is_contiguous(t) && at(t, 1) == 4);
  tc_tensor *sl = tc_slice(a, 1, 0, 3, 2);               /* cols 0, 2 */
  EXPECT(tc_size(sl, 1) == 2 && at(sl, 3) == 6);
  tc_tensor *r = tc_reshape(t, TC_SHAPE(6));             /* needs a copy */
  EXPECT(at(r, 0) == 1 && at(r, 1) == 4 && at(r, 2) == 2);

  /* Reductions */
  double v;
  EXPECT(tc_item(tc_sum_all(a), &v) == 0 && v == 21);
  tc_tensor *mx = tc_max(a, 1, false);
  EXPECT(at(mx, 0) == 3 && at(mx, 1) == 6);
  tc_tensor *am = tc_argmax(a, 0, true);
  EXPECT(tc_dtype_of(am) == TC_I64 && tc_ndim(am) == 2 && at(am, 2) == 1);
  EXPECT(at(tc_mean(a, 0, false), 1) == 3.5);

  /* Composites: softmax of equal values is uniform. */
  tc_tensor *sm = tc_softmax(tc_zeros(TC_F32, TC_SHAPE(2, 4)), -1);
  EXPECT(fabs(at(sm, 3) - 0.25) < 1e-7);
  tc_tensor *ln = tc_layer_norm(a, NULL, NULL, 0);
  /* row (1,2,3): mean 2, var 2/3 -> (-1.2247..., 0, 1.2247...) */
  EXPECT(fabs(at(ln, 0) + 1.224744871) < 1e-6 && fabs(at(ln, 1)) < 1e-7);

  /* Matmul: (2,3) @ (3,2) */
  tc_tensor *mm = tc_matmul(a, t);
  EXPECT(at(mm, 0) == 14 && at(mm, 1) == 32 && at(mm, 3) == 77);

  /* In-place through a view lands in the base. */
  EXPECT(tc_add_scalar_(sl, 100) == 0);
  EXPECT(at(a, 0) == 101 && at(a, 1) == 2 && at(a, 2) == 103);
  EXPECT(tc_copy_(a, tc_zeros(TC_F32, TC_SHAPE(3))) == 0 && at(a, 4) == 0);

  /* Errors: clear message, NULL result, inputs unchanged. */
  tc_tensor *bad = tc_add(a, tc_ones(TC_F32, TC_SHAPE(4)));
  EXPECT(bad == NULL && tc_last_error() &&
         strstr(tc_last_error(), "tc_add") == tc_last_error());
  EXPECT(tc_matmul(a, a) == NULL);
  tc_clear_error();
  EXPECT(tc_last_error() == NULL);

  tc_scope_end(mark);   /* releases every tensor above */
  tc_stats st;
  tc_stats_get(&st);
  EXPECT(st.ops > 0 && st.bytes_allocated == 0);
  if (fails == 0)
    printf("contract: all checks passed\n");
  return fails != 0;
}
