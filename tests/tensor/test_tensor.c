/*
** test_tensor.c -- the tensor module on its own: view geometry (pure
** functions, checked against strides worked out by hand), the caching
** allocator, shape validation and the op table's invariants.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tensor.h"

static tensor_geom contiguous(int ndim, const int64_t *shape)
{
  tensor_geom g = { .ndim = ndim, .offset = 0 };
  memcpy(g.shape, shape, sizeof(int64_t) * ndim);
  tensor_contiguous_strides(ndim, shape, g.stride);
  return g;
}

#define GEOM_IS(g, nd, ...)                                              \
  do {                                                                   \
    const int64_t want[] = { __VA_ARGS__ };                              \
    assert_int_equal((g).ndim, nd);                                      \
    for (int i_ = 0; i_ < (nd); i_++) {                                  \
      assert_int_equal((g).shape[i_], want[i_]);                         \
      assert_int_equal((g).stride[i_], want[(nd) + i_]);                 \
    }                                                                    \
  } while (0)

static void test_geom_reshape_view_and_copy(void **state)
{
  (void)state;
  tensor_geom g = contiguous(3, (int64_t[]){ 2, 3, 4 });
  assert_int_equal(tensor_geom_reshape("t", &g, 2, (int64_t[]){ 6, -1 }), 0);
  GEOM_IS(g, 2, 6, 4, /* strides */ 4, 1);
  /* A transposed (3,2) cannot be flattened as a view. */
  tensor_geom t = contiguous(2, (int64_t[]){ 2, 3 });
  assert_int_equal(tensor_geom_transpose("t", &t, 0, 1), 0);
  GEOM_IS(t, 2, 3, 2, 1, 3);
  assert_int_equal(tensor_geom_reshape("t", &t, 1, (int64_t[]){ 6 }), 1);
  /* but splitting a dim of it is a view: (3,2) -> (3,1,2) */
  t = contiguous(2, (int64_t[]){ 2, 3 });
  tensor_geom_transpose("t", &t, 0, 1);
  assert_int_equal(tensor_geom_reshape("t", &t, 3, (int64_t[]){ 3, 1, 2 }),
                   0);
  assert_int_equal(t.stride[0], 1);
  assert_int_equal(t.stride[2], 3);
  /* wrong size */
  g = contiguous(1, (int64_t[]){ 6 });
  assert_int_equal(tensor_geom_reshape("t", &g, 1, (int64_t[]){ 7 }), -1);
  assert_non_null(strstr(tc_last_error(), "cannot reshape"));
  tc_clear_error();
}

static void test_geom_slice_python_semantics(void **state)
{
  (void)state;
  tensor_geom g = contiguous(2, (int64_t[]){ 4, 10 });
  assert_int_equal(tensor_geom_slice("t", &g, 1, -7, 100, 3), 0);
  /* indices 3, 6, 9 */
  assert_int_equal(g.shape[1], 3);
  assert_int_equal(g.stride[1], 3);
  assert_int_equal(g.offset, 3);
  tensor_geom e = contiguous(1, (int64_t[]){ 5 });
  assert_int_equal(tensor_geom_slice("t", &e, 0, 4, 2, 1), 0);
  assert_int_equal(e.shape[0], 0);
  assert_int_equal(tensor_geom_slice("t", &e, 0, 0, 2, 0), -1);
  tc_clear_error();
}

static void test_geom_expand_and_squeeze(void **state)
{
  (void)state;
  tensor_geom g = contiguous(2, (int64_t[]){ 3, 1 });
  assert_int_equal(tensor_geom_expand("t", &g, 3, (int64_t[]){ 2, -1, 5 }),
                   0);
  GEOM_IS(g, 3, 2, 3, 5, 0, 1, 0);
  assert_int_equal(tensor_geom_expand("t", &g, 3, (int64_t[]){ 2, 4, 5 }),
                   -1);
  tc_clear_error();
  tensor_geom s = contiguous(4, (int64_t[]){ 1, 3, 1, 2 });
  assert_int_equal(tensor_geom_squeeze("t", &s, TC_ALL_DIMS), 0);
  GEOM_IS(s, 2, 3, 2, 2, 1);
  assert_int_equal(tensor_geom_unsqueeze("t", &s, -1), 0);
  GEOM_IS(s, 3, 3, 2, 1, 2, 1, 1);
}

static void test_shape_checks(void **state)
{
  (void)state;
  assert_int_equal(tensor_check_shape("f", 2, (int64_t[]){ 3, 4 }), 12);
  assert_int_equal(tensor_check_shape("f", 0, NULL), 1);
  assert_int_equal(tensor_check_shape("f", 1, (int64_t[]){ -1 }), -1);
  assert_string_equal(tc_last_error(), "f: size -1 of dim 0 is negative");
  assert_int_equal(tensor_check_shape("f", 2,
                                      (int64_t[]){ 1LL << 40, 1LL << 40 }),
                   -1);
  assert_non_null(strstr(tc_last_error(), "overflows"));
  assert_int_equal(tensor_check_shape("f", TC_MAX_DIMS + 1,
                                      (int64_t[TC_MAX_DIMS + 1]){ 0 }), -1);
  tc_clear_error();
}

static void test_alloc_reuses_blocks(void **state)
{
  (void)state;
  uint64_t live0, h0, m0, live, h, m;
  tensor_alloc_stats(&live0, &h0, &m0);
  void *a = tensor_alloc(1000);
  assert_non_null(a);
  assert_int_equal((uintptr_t)a % 64, 0);
  tensor_free_block(a, 1000);
  void *b = tensor_alloc(990);   /* same size class */
  assert_ptr_equal(a, b);
  tensor_alloc_stats(&live, &h, &m);
  assert_true(h > h0);
  tensor_free_block(b, 990);
  /* Large blocks are 2 MiB aligned and reused. */
  void *big = tensor_alloc(5u << 20);
  assert_non_null(big);
  assert_int_equal((uintptr_t)big % (2u << 20), 0);
  memset(big, 1, 5u << 20);
  tensor_free_block(big, 5u << 20);
  void *big2 = tensor_alloc((5u << 20) - 100);
  assert_ptr_equal(big, big2);
  tensor_free_block(big2, (5u << 20) - 100);
  tensor_alloc_stats(&live, &h, &m);
  assert_int_equal(live, live0);
  tensor_alloc_trim();
}

static void test_op_table_invariants(void **state)
{
  (void)state;
  for (int op = 0; op < TC_OP__MAX; op++) {
    const op_info *o = &op_table[op];
    assert_non_null(o->name);
    assert_true(o->twin < TC_OP__MAX);
    /* An in-place op names a functional twin of the same arity. */
    if (o->flags & OPF_M) {
      assert_false(op_table[o->twin].flags & OPF_M);
      assert_true(o->type == TR_DST);
    }
  }
  assert_string_equal(op_table[TC_OP_ADD].name, "ADD");
  assert_int_equal(op_table[TC_OP_ADD_].twin, TC_OP_ADD);
  assert_int_equal(tc_promote(TC_I32, TC_F32), TC_F32);
  assert_int_equal(tc_promote(TC_I64, TC_I32), TC_I64);
  assert_int_equal(tc_promote(TC_BOOL, TC_I32), TC_I32);
  assert_int_equal(tc_promote(TC_F32, TC_F64), TC_F64);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_geom_reshape_view_and_copy),
    cmocka_unit_test(test_geom_slice_python_semantics),
    cmocka_unit_test(test_geom_expand_and_squeeze),
    cmocka_unit_test(test_shape_checks),
    cmocka_unit_test(test_alloc_reuses_blocks),
    cmocka_unit_test(test_op_table_invariants),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
