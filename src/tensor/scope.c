/*
** scope.c -- scopes: a per-thread stack of the tensors the API returned
** since a mark. tc_scope_end releases the program's reference to each,
** except tc_keep()ed ones, which move to the enclosing scope (or to the
** caller when none is open).
**
** A slot stands for the program's creation reference. When the program
** releases a scoped tensor's last reference itself, on the scope's thread
** the slot is cleared and the tensor freed at once; on another thread the
** stack is not touched (it is not that thread's to change): the released
** reference passes to the slot, and the scope's end drops it. So no slot
** ever points at freed memory, and no stack is shared between threads.
*/
#include <pthread.h>
#include <stdlib.h>

#include "tensor.h"

typedef struct {
  tc_tensor **slot;     /* borrowed: each entry is a program reference */
  size_t n, cap;
  size_t *marks;        /* the mark of each open scope, outermost first */
  int depth, cap_marks;
  uint32_t id;          /* this thread's scope id (tc_tensor.scope_owner) */
} scope_stack;

static _Thread_local scope_stack sc;
static atomic_uint next_id = 1;

/* A thread that exits with scopes open ends them (its tensors would
** otherwise leak with the stack). */
static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

static void stack_free(void)
{
  free(sc.slot);
  free(sc.marks);
  sc.slot = NULL;
  sc.marks = NULL;
  sc.n = sc.cap = 0;
  sc.cap_marks = 0;
}

static void end_all(void *unused)
{
  (void)unused;
  if (sc.depth > 0)
    tc_scope_end(sc.marks[0]);
  stack_free();
}

static void exit_key_make(void) { pthread_key_create(&exit_key, end_all); }

size_t tc_scope_begin(void)
{
  if (!sc.id) {
    pthread_once(&exit_once, exit_key_make);
    pthread_setspecific(exit_key, &sc);
    sc.id = atomic_fetch_add(&next_id, 1);
  }
  if (sc.depth == sc.cap_marks) {
    int cap = sc.cap_marks ? 2 * sc.cap_marks : 16;
    size_t *m = realloc(sc.marks, sizeof *m * (size_t)cap);
    if (!m) {   /* cannot track it: the scope is a no-op, as with depth 0 */
      tc_seterr(TC_E_NOMEM, "tc_scope_begin: out of memory");
      return SIZE_MAX;
    }
    sc.marks = m;
    sc.cap_marks = cap;
  }
  sc.marks[sc.depth++] = sc.n;
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
  t->scope_owner = sc.id;
  sc.slot[sc.n++] = t;
}

bool tensor_scope_forget(tc_tensor *t)
{
  if (t->scope_owner != sc.id || sc.id == 0)
    return false;   /* another thread's scope: it keeps t until it ends */
  if ((size_t)t->scope_slot < sc.n && sc.slot[t->scope_slot] == t)
    sc.slot[t->scope_slot] = NULL;
  t->scope_slot = -1;
  t->scope_owner = 0;
  return true;
}

tc_tensor *tc_keep(tc_tensor *t)
{
  if (t && tensor_arg_ok(__func__, t))
    t->kept = 1;
  return t;
}

/* Release the program's reference a slot stands for. If the program
** released its last reference on another thread, that reference passed
** to the slot: drop it. The slot is let go before its user reference
** (release order): a tc_release on another thread that then takes the
** last user reference (acquire) sees no slot and drops its own; one that
** took it before saw the slot and passed its reference here. */
static void release_slot(tc_tensor *t)
{
  t->scope_slot = -1;
  t->scope_owner = 0;
  int u = atomic_load_explicit(&t->user_refs, memory_order_relaxed);
  if (u == 1)   /* the slot's is the program's only one: nobody races us */
    atomic_store_explicit(&t->user_refs, u = 0, memory_order_release);
  while (u > 0 && !atomic_compare_exchange_weak_explicit(
                    &t->user_refs, &u, u - 1, memory_order_release,
                    memory_order_relaxed))
    ;
  tensor_unref(t);
}

/* End the innermost open scope. */
static void end_innermost(void)
{
  size_t from = sc.marks[--sc.depth];
  size_t w = from;
  for (size_t i = from; i < sc.n; i++) {
    tc_tensor *t = sc.slot[i];
    if (!t)
      continue;   /* released early on this thread */
    bool keep = t->kept && atomic_load(&t->user_refs) > 0;
    t->kept = 0;
    if (!keep) {
      release_slot(t);
    } else if (sc.depth > 0) {   /* now owned by the enclosing scope */
      t->scope_slot = (int32_t)w;
      sc.slot[w++] = t;
    } else {                     /* now owned by the caller */
      t->scope_slot = -1;
      t->scope_owner = 0;
    }
  }
  sc.n = w;
}

/* Ends the scope whose mark this is, and any opened inside it and not yet
** ended (as an exception would unwind them). A mark of no open scope is an
** error: nothing is released. */
void tc_scope_end(size_t mark)
{
  int d = sc.depth - 1;
  while (d >= 0 && sc.marks[d] != mark)
    d--;
  if (d < 0) {
    tc_seterr(TC_E_ARG, "tc_scope_end: %zu is not the mark of an open scope "
              "of this thread (%d open)", mark, sc.depth);
    tensor_log(TC_LOG_ERROR, "%s", tc_last_error());
    return;
  }
  /* Releasing lazy tensors takes trace's lock: take it once for all. */
  if (tensor_hooks.lock)
    tensor_hooks.lock();
  while (sc.depth > d)
    end_innermost();
  if (tensor_hooks.unlock)
    tensor_hooks.unlock();
  if (sc.depth == 0 && sc.cap > TUNE_SCOPE_KEEP_SLOTS)
    stack_free();   /* a big one goes back; a small one serves the next */
}
