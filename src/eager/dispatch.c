/*
** dispatch.c -- the dispatcher: kernels register against keys; a call runs
** on the highest key of (input keys | include sets) minus the exclude set
** that has a handler (PyTorch's key sets). Routing lives here, not in ops.
*/
#include "eager.h"

static eager_kernel table[TC_KEY__MAX][TC_OP__MAX];
static _Atomic uint32_t global_include;
static _Thread_local eager_tls_keys tls;

void eager_register(tc_key key, tc_op op, eager_kernel fn)
{
  table[key][op] = fn;
}

eager_kernel eager_lookup(tc_key key, tc_op op) { return table[key][op]; }

eager_tls_keys eager_tls_get(void) { return tls; }

void eager_tls_set(eager_tls_keys k) { tls = k; }

void eager_global_include(uint32_t keys, bool on)
{
  if (on)
    atomic_fetch_or(&global_include, keys);
  else
    atomic_fetch_and(&global_include, ~keys);
}

static tc_tensor *run_highest(const eager_call *c, uint32_t ks);

tc_tensor *eager_dispatch(const eager_call *c)
{
  uint32_t ks = atomic_load_explicit(&global_include, memory_order_relaxed)
                | tls.include;
  for (int i = 0; i < c->nin; i++)
    if (c->in[i])   /* optional inputs (layer_norm's gamma, beta) */
      ks |= c->in[i]->keys;
  if (c->dst)
    ks |= c->dst->keys;
  eager_count(ST_OPS);
  return run_highest(c, ks & ~tls.exclude);
}

tc_tensor *eager_redispatch(const eager_call *c, tc_key below)
{
  uint32_t ks = atomic_load_explicit(&global_include, memory_order_relaxed)
                | tls.include;
  for (int i = 0; i < c->nin; i++)
    if (c->in[i])
      ks |= c->in[i]->keys;
  if (c->dst)
    ks |= c->dst->keys;
  return run_highest(c, ks & ~tls.exclude & (TC_KEYSET(below) - 1));
}

static tc_tensor *run_highest(const eager_call *c, uint32_t ks)
{
  /* Highest key first; a key without a handler falls through. */
  while (ks) {
    int k = 31 - __builtin_clz(ks);
    if (k < TC_KEY__MAX && table[k][c->op])
      return table[k][c->op](c);
    ks &= ~(1u << k);
  }
  tc_seterr(TC_E_INTERNAL, "%s: no kernel registered for op %s", c->fn,
            op_table[c->op].name);
  return NULL;
}
