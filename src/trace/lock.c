/*
** lock.c -- the trace lock: one lock over the graph, shared by every
** thread's traced ops, taken at least once per traced op (its handler) and
** once per realization or scope end. Reentrant on one thread.
**
** Underneath is a futex word (Drepper's "Futexes are tricky", mutex 2):
** one atomic each way, where a pthread mutex costs some 60 instructions a
** pair. An uncontended atomic still costs about as much as recording a
** small op's node, and most programs trace on one thread, so the lock is
** biased (HotSpot's biased locking, made sound with membarrier(2)): the
** first thread to take it owns the bias and from then on takes and drops
** it with plain stores (`held`). The first other thread that wants the
** lock revokes the bias, once and for good: under the futex it raises
** `revoked`, runs membarrier(2), which puts a full barrier on every
** running thread of the process, and waits for `held` to fall. Then every
** thread takes the futex, as if there had never been a bias.
**
** Why that excludes: the owner stores held = 1, then (compiler barrier
** only) loads revoked; the revoker stores revoked = 1, then membarrier,
** then loads held. membarrier turns the owner's compiler barrier into a
** full one relative to the revoker's, so the owner sees revoked = 1 (and
** backs off to the futex) or the revoker sees held = 1 (and waits): never
** both zero (membarrier(2), "fast path / slow path" example).
*/
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "trace_int.h"

static atomic_int futex_word;     /* 0 free, 1 held, 2 held with waiters */
static atomic_uint next_thread_id = 1;

trace_lock_bias trace_bias;
_Thread_local trace_lock_thread trace_lock_me;

static long membarrier(int cmd)
{
  return syscall(__NR_membarrier, cmd, 0, 0);
}

static void futex(atomic_int *w, int op, int val)
{
  syscall(SYS_futex, w, op, val, NULL, NULL, 0);
}

static void futex_lock(void)
{
  int c = 0;
  if (atomic_compare_exchange_strong_explicit(&futex_word, &c, 1,
                                              memory_order_acquire,
                                              memory_order_relaxed))
    return;
  if (c != 2)
    c = atomic_exchange_explicit(&futex_word, 2, memory_order_acquire);
  while (c != 0) {
    futex(&futex_word, FUTEX_WAIT_PRIVATE, 2);
    c = atomic_exchange_explicit(&futex_word, 2, memory_order_acquire);
  }
}

static void futex_unlock(void)
{
  if (atomic_exchange_explicit(&futex_word, 0, memory_order_release) == 2)
    futex(&futex_word, FUTEX_WAKE_PRIVATE, 1);
}

/* Under the futex: end the bias for good, once the owner has left. */
static void bias_revoke(void)
{
  atomic_store(&trace_bias.revoked, 1);
  /* The expedited barrier needs the process registered (trace_lock_init);
  ** after a fork without exec it may not be: the global one always works,
  ** slower (it waits for a grace period). */
  if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 &&
      membarrier(MEMBARRIER_CMD_GLOBAL) != 0)
    tensor_log(TC_LOG_ERROR, "trace lock: membarrier failed revoking the "
               "bias");   /* not reached: init checked both commands */
  while (atomic_load_explicit(&trace_bias.held, memory_order_acquire))
    sched_yield();   /* the owner is inside a critical section: not long */
  if (tensor_log_on(TC_LOG_REGIONS))
    tensor_log(TC_LOG_REGIONS, "trace lock: a second thread traces; the "
               "lock is no longer biased to the first");
}

static void lock_slow(void)
{
  trace_lock_thread *me = &trace_lock_me;
  if (!me->self_id)
    me->self_id = atomic_fetch_add_explicit(&next_thread_id, 1,
                                            memory_order_relaxed);
  futex_lock();
  me->by_bias = false;
  if (atomic_load_explicit(&trace_bias.revoked, memory_order_relaxed))
    return;
  unsigned owner = atomic_load_explicit(&trace_bias.owner,
                                        memory_order_relaxed);
  if (owner == 0)   /* the first thread: biased to it from its next take */
    atomic_store_explicit(&trace_bias.owner, me->self_id,
                          memory_order_relaxed);
  else if (owner != me->self_id)
    bias_revoke();
}

void trace_lock_slow(void)
{
  unsigned id = trace_lock_me.self_id;
  if (id && atomic_load_explicit(&trace_bias.owner, memory_order_relaxed) == id)
    atomic_store_explicit(&trace_bias.held, 0, memory_order_release);   /* the
                                                       bias was revoked */
  lock_slow();
}

void trace_unlock_slow(void) { futex_unlock(); }

/* A forked child has one thread: a bias held by another is gone with it. */
static void atfork_child(void)
{
  unsigned id = trace_lock_me.self_id;
  if (atomic_load(&trace_bias.owner) != id || !id) {
    atomic_store(&trace_bias.held, 0);
    atomic_store(&trace_bias.revoked, 1);
  }
}

void trace_lock_init(void)
{
  long cmds = membarrier(MEMBARRIER_CMD_QUERY);
  bool ok = cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
            (cmds & MEMBARRIER_CMD_GLOBAL) &&
            membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
  if (!ok)
    atomic_store(&trace_bias.revoked, 1);   /* the futex alone */
  pthread_atfork(NULL, NULL, atfork_child);
}
