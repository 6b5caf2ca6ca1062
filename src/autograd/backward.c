/*
** backward.c -- the engine: tc_backward walks the graph below the loss in
** reverse topological order, runs each node's derivative (ordinary tc ops,
** grad mode off), sums the gradients that reach a node, accumulates those
** that reach a leaf into its grad, and frees what each node saved as soon
** as it has run.
*/
#include <stdlib.h>
#include <string.h>

#include "autograd.h"

typedef struct {
  ag_node **v;
  int n, cap;
} node_list;

static int list_push(node_list *l, ag_node *x)
{
  if (tensor_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v) < 0)
    return tc_seterr(TC_E_NOMEM, "tc_backward: out of memory"), -1;
  l->v[l->n++] = x;
  return 0;
}

/* Every node below root, once, each with deps = the number of edges from
** other nodes of the graph into it. A consumed node is an error: its saved
** values are gone. */
static int collect(ag_node *root, node_list *all)
{
  node_list todo = { 0 };
  int rc = list_push(&todo, root);
  root->deps = 0;
  root->work_next = root;   /* "seen" mark: work_next points at itself */
  while (rc == 0 && todo.n) {
    ag_node *n = todo.v[--todo.n];
    if (n->consumed) {
      tc_seterr(TC_E_ARG, "tc_backward: backward through a graph a second "
                "time (the first backward freed its saved values; run the "
                "forward again)");
      rc = -1;
      break;
    }
    rc = list_push(all, n);
    for (int i = 0; rc == 0 && i < n->nin; i++) {
      ag_node *m = n->next[i].fn;
      if (!m)
        continue;
      if (m->work_next != m) {
        m->work_next = m;
        m->deps = 0;
        rc = list_push(&todo, m);
      }
      m->deps++;
    }
  }
  for (int i = 0; i < todo.n; i++)   /* after an error: unmark */
    todo.v[i]->work_next = NULL;
  free(todo.v);
  return rc;
}

/* The values n saved must be as they were: a write in place since then
** would make its gradient silently wrong. */
static int check_saved(const ag_node *n)
{
  for (int s = 0; s < AG_SLOTS; s++)
    if (n->saved[s] && ag_version(n->saved[s]) != n->saved_version[s])
      return tc_seterr(TC_E_ARG, "tc_backward: a tensor that %s saved for "
                       "backward was modified by an in-place op (version "
                       "%llu, saved at %llu)", op_table[n->call.op].name,
                       (unsigned long long)ag_version(n->saved[s]),
                       (unsigned long long)n->saved_version[s]), -1;
  return 0;
}

/* *acc += g (functional: a new tensor, so values alias nothing). */
static int accumulate(tc_tensor **acc, tc_tensor *g)
{
  if (!*acc) {
    *acc = tensor_ref(g);
    return 0;
  }
  tc_tensor *sum = ag_internal(tc_add(*acc, g));
  if (!sum)
    return -1;
  tensor_unref(*acc);
  *acc = sum;
  return 0;
}

/* Does g show the same value as h (a handle on its data or its node)? */
static bool aliases(const tc_tensor *g, const tc_tensor *h)
{
  return h && ((g->storage && g->storage == h->storage) ||
               (g->lazy && g->lazy == h->lazy));
}

/* A leaf's grad is its own contiguous tensor (never a view, never shared
** with another leaf's), so the program and optimizers may write it: g is
** copied when it aliases `from` (the gradient it was derived from). */
static int accumulate_leaf(tc_tensor *leaf, tc_tensor *g,
                           const tc_tensor *from)
{
  ag_meta *m = leaf->grad_meta;
  if (!m)
    return 0;
  tc_tensor *own = g;
  if (aliases(g, from) || atomic_load(&g->refs) > 1 ||
      !tensor_is_contiguous(g) || g->offset)
    own = ag_internal(tc_cast(g, (tc_dtype)g->dtype));
  else
    tensor_ref(g);
  if (!own)
    return -1;
  ag_grad_lock();
  int rc = accumulate(&m->grad, own);
  ag_grad_unlock();
  tensor_unref(own);
  return rc;
}

/* Run node n (its grad is set): pass each input's gradient on. */
static int run_node(ag_node *n, node_list *ready)
{
  int rc = check_saved(n);
  tc_tensor *gin[3] = { NULL, NULL, NULL };
  if (rc == 0 && n->grad) {
    size_t mark = tc_scope_begin();
    rc = ag_node_grads(n, n->grad, gin);
    for (int i = 0; i < 3; i++)
      gin[i] = rc == 0 ? ag_internal(gin[i]) : NULL;
    tc_scope_end(mark);
  }
  for (int i = 0; rc == 0 && i < n->nin; i++) {
    ag_node *m = n->next[i].fn;
    if (gin[i] && m)
      rc = accumulate(&m->grad, gin[i]);
    else if (gin[i] && n->next[i].leaf)
      rc = accumulate_leaf(n->next[i].leaf, gin[i], n->grad);
    if (rc == 0 && m && --m->deps == 0)
      rc = list_push(ready, m);
  }
  for (int i = 0; i < 3; i++)
    tensor_unref(gin[i]);
  /* Consumed: what it saved and its gradient go now. */
  tensor_unref(n->grad);
  n->grad = NULL;
  for (int s = 0; s < AG_SLOTS; s++) {
    tensor_unref(n->saved[s]);
    n->saved[s] = NULL;
  }
  n->consumed = true;
  return rc;
}

static int run_graph(ag_node *root, tc_tensor *seed)
{
  node_list all = { 0 }, ready = { 0 };
  int rc = collect(root, &all);
  if (rc == 0) {
    root->grad = tensor_ref(seed);
    rc = list_push(&ready, root);
  }
  while (rc == 0 && ready.n)
    rc = run_node(ready.v[--ready.n], &ready);
  for (int i = 0; i < all.n; i++) {   /* after an error: drop partial sums */
    tensor_unref(all.v[i]->grad);
    all.v[i]->grad = NULL;
    all.v[i]->work_next = NULL;
  }
  free(all.v);
  free(ready.v);
  return rc;
}

int tc_backward(tc_tensor *loss)
{
  const char *fn = __func__;
  eager_init();
  if (!tensor_arg_ok(fn, loss))
    return -1;
  if (loss->numel != 1)
    return tc_seterr(TC_E_SHAPE, "%s: the loss must have one element, got "
                     "%lld (reduce it first: tc_sum_all, tc_mean)", fn,
                     (long long)loss->numel), -1;
  ag_meta *m = ag_needs_grad(loss) ? loss->grad_meta : NULL;
  if (!m || (!m->fn && !m->requires_grad))
    return tc_seterr(TC_E_ARG, "%s: the loss does not require grad (no "
                     "input of it requires grad, or it was computed with "
                     "grad mode off)", fn), -1;
  bool was = tc_set_grad_enabled(false);
  tc_tensor *seed = ag_internal(ag_on_device_of(loss,
    tc_ones((tc_dtype)loss->dtype, loss->ndim, loss->shape)));
  int rc = -1;
  if (seed)
    rc = m->fn ? run_graph(m->fn, seed) : accumulate_leaf(loss, seed, NULL);
  tensor_unref(seed);
  tc_set_grad_enabled(was);
  return rc;
}

tc_tensor *ag_on_device_of(const tc_tensor *like, tc_tensor *t)
{
  if (!t || !like || tensor_device_of(t) == tensor_device_of(like))
    return t;
  tc_tensor *d = tc_to(t, tensor_device_of(like) == TC_DEV_CUDA ? "cuda"
                                                                : "cpu");
  tc_release(t);
  return d;
}
