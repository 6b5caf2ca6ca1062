/*
** test_lock.c -- the trace lock (src/trace/lock.c): biased to the first
** thread that takes it, revoked when a second one wants it. Each test
** counts with a plain (non-atomic) integer under the lock from several
** threads at once: a lost increment is a failure of exclusion. Its own
** process, so the first taker really gets the bias.
*/
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../src/trace/trace_int.h"

#define TAKES 200000   /* per thread */
#define THREADS 3      /* besides the owner */

static long counter;   /* plain: only the lock protects it */
static atomic_int go;   /* the others' start signal */

/* counter++, spread out: a read, a pause, a write, so that two threads
** inside at once lose increments rather than rarely. */
static void bump(void)
{
  long c = counter;
  for (volatile int k = 0; k < 20; k++)
    ;
  counter = c + 1;
}

/* Take the lock TAKES times, nested once in every 16, and count. */
static void count_under_lock(void)
{
  for (int i = 0; i < TAKES; i++) {
    trace_lock();
    if (i % 16 == 0) {
      trace_lock();   /* reentrant */
      bump();
      trace_unlock();
    } else {
      bump();
    }
    trace_unlock();
  }
}

static void *other_thread(void *arg)
{
  (void)arg;
  while (!atomic_load(&go))
    ;
  count_under_lock();
  return NULL;
}

/* Run the owner (this thread) and THREADS others at once, the others
** starting while the owner holds the lock. The count, or -2 if another
** thread got in while the owner held it. */
static long contend(void)
{
  counter = 0;
  atomic_store(&go, 0);
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++)
    if (pthread_create(&th[i], NULL, other_thread, NULL) != 0)
      return -1;
  /* The owner lets the others go from inside the lock and stays 20 ms:
  ** whoever revokes the bias must wait for it to leave. */
  trace_lock();
  atomic_store(&go, 1);
  long before = counter;
  usleep(20000);
  bool alone = counter == before;
  counter += 1000;
  trace_unlock();
  count_under_lock();
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
  return alone ? counter : -2;
}

static void test_lock_bias_revoked_under_contention(void **state)
{
  (void)state;
  char *log = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&log, &len);
  tensor_log_to(f, TC_LOG_REGIONS);
  long got = contend();
  tensor_log_to(NULL, 0);
  fclose(f);
  assert_int_equal(got, 1000 + (long)TAKES * (THREADS + 1));
  /* The revocation said so once (TC_LOG=regions), where membarrier(2)
  ** exists; without it the lock never had a bias. */
  if (len > 0)
    assert_non_null(strstr(log, "no longer biased"));
  assert_null(strstr(log ? log : "", "membarrier failed"));
  free(log);
  /* After it, the futex alone: still exclusive. */
  assert_int_equal(contend(), 1000 + (long)TAKES * (THREADS + 1));
}

/* A forked child (one thread, the owner's copy, the bias still its) keeps
** counting right, and threads it starts take the lock from it: the child
** may not inherit the membarrier registration, and revokes all the same. */
static void test_lock_in_forked_child(void **state)
{
  (void)state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    long got = contend();
    _exit(got == 1000 + (long)TAKES * (THREADS + 1) ? 0 : 1);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
  trace_init();   /* as eager's init does: the lock is set up there */
  trace_lock();   /* this thread takes the lock first: the bias is its */
  trace_unlock();
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_lock_in_forked_child),   /* first: bias intact */
    cmocka_unit_test(test_lock_bias_revoked_under_contention),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
