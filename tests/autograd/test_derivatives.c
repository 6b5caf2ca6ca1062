/*
** tests/autograd/test_derivatives.c -- the derivative table against the op
** table: every op of ops.def has its row (derivatives.c also checks the
** order at compile time), and the row's kind fits the op.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "../../src/autograd/autograd.h"

static void test_every_op_has_its_row(void **state) {
  (void)state;
  for (int op = 0; op < TC_OP__MAX; op++) {
    const ag_deriv_info *d = &ag_deriv[op];
    if (!d->name || strcmp(d->name, op_table[op].name) != 0)
      fail_msg("op %s: derivatives.def row is %s", op_table[op].name,
               d->name ? d->name : "(missing)");
    assert_int_not_equal(d->kind, DK_NONE);
  }
}

/* Bool and index results have no gradient; in-place ops reuse their twin's
** row or have their own; the view op is inverted by geometry. */
static void test_row_kinds_fit_the_ops(void **state) {
  (void)state;
  for (int op = 0; op < TC_OP__MAX; op++) {
    const op_info *o = &op_table[op];
    const ag_deriv_info *d = &ag_deriv[op];
    if (o->type == TR_CMP || o->type == TR_IDX)
      assert_int_equal(d->kind, DK_NONDIFF);
    if (o->kind == OPK_VW)
      assert_int_equal(d->kind, DK_VIEW);
    if (d->kind == DK_TWIN) {
      assert_true(o->flags & OPF_M);
      assert_int_equal(ag_deriv[o->twin].kind, DK_ROW);
    }
    if (d->kind == DK_ROW || d->kind == DK_TWIN)
      assert_true(o->nin > 0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_op_has_its_row),
      cmocka_unit_test(test_row_kinds_fit_the_ops),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
