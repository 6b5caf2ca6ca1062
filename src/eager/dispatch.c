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

/* A tensor's keys (tensor_keys), 0 for an absent (optional) input. */
static inline uint32_t keys_or_none(const tc_tensor *t)
{
  return t ? tensor_keys(t) : 0;
}

/* The keys of the call: the global and thread include sets, and every
** input's and the destination's (tensor_keys: a shared lazy input may be
** materialized meanwhile on another thread). The three inputs are spelled
** out: GCC does not unroll a loop of acquire loads, and this is the
** per-op path. */
static inline __attribute__((always_inline)) uint32_t
call_keys(const eager_call *c)
{
  uint32_t ks = atomic_load_explicit(&global_include, memory_order_relaxed)
                | tls.include;
  _Static_assert(sizeof c->in / sizeof c->in[0] == 3, "three inputs");
  int n = c->nin;
  return ks | keys_or_none(n > 0 ? c->in[0] : NULL)
         | keys_or_none(n > 1 ? c->in[1] : NULL)
         | keys_or_none(n > 2 ? c->in[2] : NULL) | keys_or_none(c->dst);
}

tc_tensor *eager_dispatch(const eager_call *c)
{
  uint32_t ks = call_keys(c);
  eager_count(ST_OPS);
  return run_highest(c, ks & ~tls.exclude);
}

tc_tensor *eager_redispatch(const eager_call *c, tc_key below)
{
  return run_highest(c, call_keys(c) & ~tls.exclude & (TC_KEYSET(below) - 1));
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
