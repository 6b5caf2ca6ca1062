/*
** scope.c -- scopes: a per-thread stack of the tensors the API returned
** since a mark. tc_scope_end releases them, except tc_keep()ed ones, which
** move to the enclosing scope (or to the caller when none is open).
*/
#include <stdlib.h>

#include "tensor.h"

static _Thread_local struct {
  tc_tensor **slot;     /* borrowed: each entry is the scope's reference */
  size_t n, cap;
  int depth;
} sc;

size_t tc_scope_begin(void)
{
  sc.depth++;
  return sc.n;
}

void tensor_scope_track(tc_tensor *t)
{
  if (sc.depth == 0 || !t || t->scope_slot >= 0)
    return;
  if (sc.n == sc.cap) {
    size_t cap = sc.cap ? sc.cap * 2 : 256;
    tc_tensor **p = realloc(sc.slot, cap * sizeof *p);
    if (!p)
      return;   /* untracked: the caller still owns its reference */
    sc.slot = p;
    sc.cap = cap;
  }
  t->scope_slot = (int32_t)sc.n;
  sc.slot[sc.n++] = t;
}

/* A tracked tensor died early (released by the program): drop its slot. */
void tensor_scope_forget(tc_tensor *t)
{
  if ((size_t)t->scope_slot < sc.n && sc.slot[t->scope_slot] == t)
    sc.slot[t->scope_slot] = NULL;
  t->scope_slot = -1;
}

tc_tensor *tc_keep(tc_tensor *t)
{
  if (t)
    t->kept = 1;
  return t;
}

void tc_scope_end(size_t mark)
{
  if (sc.depth == 0 || mark > sc.n)
    return;
  sc.depth--;
  size_t w = mark;
  for (size_t i = mark; i < sc.n; i++) {
    tc_tensor *t = sc.slot[i];
    if (!t)
      continue;
    if (t->kept) {
      t->kept = 0;
      if (sc.depth > 0) {          /* now owned by the enclosing scope */
        t->scope_slot = (int32_t)w;
        sc.slot[w++] = t;
      } else {
        t->scope_slot = -1;        /* now owned by the caller */
      }
    } else {
      t->scope_slot = -1;
      tc_release(t);   /* the program's creation reference */
    }
  }
  sc.n = w;
  if (sc.depth == 0) {
    free(sc.slot);
    sc.slot = NULL;
    sc.n = sc.cap = 0;
  }
}
