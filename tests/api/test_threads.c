/*
** test_threads.c -- tc.h's thread contract under stress, eagerly and traced
** (api-traced): tensors made on one thread are used, read and released on
** others; scoped tensors are released early by another thread; pending
** in-place writes survive the thread that made them; a thread that exits
** with scopes open leaves nothing behind. Every value is checked against
** doubles computed here, and the sanitized build runs it under ASan/LSan.
*/
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>

#include "testutil.h"

#define N 257          /* elements per tensor: not a multiple of a lane */
#define ITEMS 48       /* tensors through the queue */
#define CONSUMERS 3

static uint64_t live_bytes(void) {
  tc_stats s;
  tc_stats_get(&s);
  return s.bytes_allocated;
}

/* Element i of item k: exact in f32. */
static double item_value(int k, int64_t i) { return (double)((k * 7 + i) % 23) - 11; }

/* -- A queue of tensors handed from thread to thread -------------------------- */

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  tc_tensor *slot[ITEMS];
  int key[ITEMS];
  int head, tail;
  bool done;
} queue;

static void q_push(queue *q, tc_tensor *t, int k) {
  pthread_mutex_lock(&q->mu);
  q->slot[q->tail] = t;
  q->key[q->tail++] = k;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

static tc_tensor *q_pop(queue *q, int *k) {
  pthread_mutex_lock(&q->mu);
  while (q->head == q->tail && !q->done) pthread_cond_wait(&q->cv, &q->mu);
  tc_tensor *t = NULL;
  if (q->head < q->tail) {
    *k = q->key[q->head];
    t = q->slot[q->head++];
  }
  pthread_mutex_unlock(&q->mu);
  return t;
}

static queue q = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
static _Atomic int checked, bad;

/* The producer makes each item as ops (lazy when traced): 2 * base + 1. */
static void *producer(void *arg) {
  (void)arg;
  double v[N];
  for (int k = 0; k < ITEMS; k++) {
    for (int64_t i = 0; i < N; i++) v[i] = item_value(k, i);
    tc_tensor *base = tu_from(TC_F32, 1, (int64_t[]){N}, v);
    tc_tensor *twice = tc_mul_scalar(base, 2.0);
    tc_tensor *t = tc_add_scalar(twice, 1.0);
    tc_release(twice);   /* t's graph (or value) keeps what it needs */
    tc_release(base);
    q_push(&q, t, k);
  }
  pthread_mutex_lock(&q.mu);
  q.done = true;
  pthread_cond_broadcast(&q.cv);
  pthread_mutex_unlock(&q.mu);
  return NULL;
}

/* Each consumer computes sum(exp(t / 16) * t) of the items it takes, reads
** it, and releases the item (made on another thread). Its own tensors are
** scoped. */
static void *consumer(void *arg) {
  (void)arg;
  int k;
  tc_tensor *t;
  while ((t = q_pop(&q, &k))) {
    size_t mark = tc_scope_begin();
    tc_tensor *s = tc_sum_all(tc_mul(tc_exp(tc_div_scalar(t, 16.0)), t));
    double got;
    if (!s || tc_item(s, &got) != 0) {
      bad++;
    } else {
      double want = 0;
      for (int64_t i = 0; i < N; i++) {
        double x = 2 * item_value(k, i) + 1;
        want += exp(x / 16) * x;
      }
      if (!tu_close(got, want, 2e-5, 1e-3)) bad++;
    }
    tc_scope_end(mark);
    tc_release(t);
    checked++;
  }
  return NULL;
}

static void test_handoff_between_threads(void **state) {
  (void)state;
  uint64_t before = live_bytes();
  pthread_t p, c[CONSUMERS];
  pthread_create(&p, NULL, producer, NULL);
  for (int i = 0; i < CONSUMERS; i++) pthread_create(&c[i], NULL, consumer, NULL);
  pthread_join(p, NULL);
  for (int i = 0; i < CONSUMERS; i++) pthread_join(c[i], NULL);
  assert_int_equal(checked, ITEMS);
  assert_int_equal(bad, 0);
  TU_OK(tc_sync());
  assert_true(live_bytes() == before);
}

/* -- Scoped tensors released early by another thread ---------------------------- */

typedef struct {
  tc_tensor *t[8];
  int n;
} handful;

static void *release_all(void *arg) {
  handful *h = arg;
  for (int i = 0; i < h->n; i++) {
    double v;
    tc_tensor *s = tc_sum_all(h->t[i]);
    if (tc_item(s, &v) != 0 || v != 64 * 65 * (0.5 + i)) bad++;
    tc_release(s);
    tc_release(h->t[i]);   /* the creating thread's scope holds it */
  }
  return NULL;
}

static void test_release_from_other_thread(void **state) {
  (void)state;
  uint64_t before = live_bytes();
  for (int rep = 0; rep < 20; rep++) {
    size_t mark = tc_scope_begin();
    tc_tensor *x = TU_NN(tc_full(TC_F32, TC_SHAPE(64, 65), 0.5));
    handful h = {.n = 8};
    for (int i = 0; i < 8; i++) h.t[i] = TU_NN(tc_add_scalar(x, i));
    /* Odd reps: the other thread releases the scope's tensors before the
    ** scope ends. Even reps: it gets references of its own and releases
    ** them while the scope ends (each side drops its own). */
    if (!(rep % 2))
      for (int i = 0; i < 8; i++) tc_retain(h.t[i]);
    pthread_t th;
    pthread_create(&th, NULL, release_all, &h);
    if (rep % 2) pthread_join(th, NULL);
    tc_scope_end(mark);
    if (!(rep % 2)) pthread_join(th, NULL);
  }
  assert_int_equal(bad, 0);
  TU_OK(tc_sync());
  assert_true(live_bytes() == before);
}

/* -- Writes that outlive their thread --------------------------------------------- */

static tc_tensor *state_t;

static void *writer(void *arg) {
  int id = (int)(intptr_t)arg;
  tc_tensor *row = tc_slice(state_t, 0, id, id + 1, 1);
  for (int i = 0; i < 10; i++) {
    if (tc_add_scalar_(row, 1.0) != 0) bad++;
    if (tc_mul_scalar_(row, 2.0) != 0) bad++;
  }
  tc_release(row);
  return NULL;   /* the writes may still be pending */
}

static void test_writes_outlive_thread(void **state) {
  (void)state;
  state_t = TU_NN(tc_zeros(TC_F64, TC_SHAPE(4, 33)));
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {   /* one thread per row, one at a time */
    pthread_create(&th[i], NULL, writer, (void *)(intptr_t)i);
    pthread_join(th[i], NULL);
  }
  double want = 0;
  for (int i = 0; i < 10; i++) want = (want + 1) * 2;
  double *g = tu_read(state_t);
  for (int i = 0; i < 4 * 33; i++)
    if (g[i] != want) fail_msg("state[%d] = %g, expected %g", i, g[i], want);
  free(g);
  assert_int_equal(bad, 0);
  tc_release(state_t);
}

/* A write made on one thread and completed by tc_sync on another. */
static void *syncer(void *arg) {
  (void)arg;
  if (tc_sync() != 0) bad++;
  return NULL;
}

static void test_sync_from_other_thread(void **state) {
  (void)state;
  tc_tensor *x = TU_NN(tc_zeros(TC_F32, TC_SHAPE(100)));
  TU_OK(tc_add_scalar_(x, 3.0));
  pthread_t th;
  pthread_create(&th, NULL, syncer, NULL);
  pthread_join(th, NULL);
  tc_tensor *s = TU_NN(tc_sum_all(x));
  assert_true(tu_same(tu_item(s), 300));
  tc_release(s);
  tc_release(x);
  assert_int_equal(bad, 0);
}

/* -- A thread that exits with scopes open ---------------------------------------- */

static void *leave_scopes_open(void *arg) {
  (void)arg;
  tc_scope_begin();
  tc_tensor *a = tc_ones(TC_F32, TC_SHAPE(1000));
  tc_scope_begin();
  tc_tensor *b = tc_exp(a);
  double v;
  if (tc_item(tc_sum_all(b), &v) != 0) bad++;
  return NULL;   /* no tc_scope_end */
}

static void test_thread_exit_with_open_scopes(void **state) {
  (void)state;
  uint64_t before = live_bytes();
  for (int i = 0; i < 10; i++) {
    pthread_t th;
    pthread_create(&th, NULL, leave_scopes_open, NULL);
    pthread_join(th, NULL);
  }
  TU_OK(tc_sync());
  assert_int_equal(bad, 0);
  assert_true(live_bytes() == before);
}

/* -- Everything at once ----------------------------------------------------------- */

static tc_tensor *shared_ro;

/* Many threads read one tensor (made lazily on the main thread) and each
** keeps its own state updated in place: no lost or mixed-up writes. */
static void *mixed(void *arg) {
  int id = (int)(intptr_t)arg;
  tc_tensor *mine = tc_zeros(TC_F32, TC_SHAPE(31, 7));
  for (int it = 0; it < 40; it++) {
    size_t mark = tc_scope_begin();
    tc_tensor *d = tc_mul_scalar(shared_ro, (double)(id + 1));
    if (tc_add_(mine, d) != 0) bad++;
    if (it % 7 == 0 && tc_sync() != 0) bad++;
    tc_scope_end(mark);
  }
  double *g = tu_read(mine);
  for (int i = 0; i < 31 * 7; i++)
    if (g[i] != 40.0 * (id + 1) * ((i % 5) - 2)) bad++;
  free(g);
  tc_release(mine);
  return NULL;
}

static void test_many_threads_mixed(void **state) {
  (void)state;
  double v[31 * 7];
  for (int i = 0; i < 31 * 7; i++) v[i] = (i % 5) - 2;
  tc_tensor *base = tu_from(TC_F32, 2, (int64_t[]){31, 7}, v);
  shared_ro = TU_NN(tc_mul_scalar(base, 1.0));   /* lazy when traced */
  tc_release(base);
  pthread_t th[6];
  for (int i = 0; i < 6; i++) pthread_create(&th[i], NULL, mixed, (void *)(intptr_t)i);
  for (int i = 0; i < 6; i++) pthread_join(th[i], NULL);
  assert_int_equal(bad, 0);
  tc_release(shared_ro);
}

/* -- Counters: every thread's ops are counted, after it exits too ------------ */

#define COUNTED_OPS 200

static void *count_ops(void *arg) {
  tc_tensor *x = arg;
  for (int i = 0; i < COUNTED_OPS; i++)
    tc_release(TU_NN(tc_neg(x)));
  return NULL;
}

static uint64_t ops_now(void) {
  tc_stats s;
  tc_stats_get(&s);
  return s.ops;
}

static void test_stats_count_every_thread(void **state) {
  (void)state;
  tc_tensor *x = TU_NN(tc_full(TC_F32, TC_SHAPE(8), 2.0));
  tc_realize(x);
  tc_stats_reset();
  count_ops(x);   /* the ops one run counts, on this thread */
  uint64_t one = ops_now();
  assert_true(one >= COUNTED_OPS);
  /* two rounds of threads that exit before the sums are read: the second
  ** round takes over the first's counters, values and all */
  for (int round = 1; round <= 2; round++) {
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, count_ops, x);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    assert_int_equal(ops_now(), one * (1 + 4 * (uint64_t)round));
  }
  tc_stats_reset();   /* a reset covers the exited threads' counts */
  assert_int_equal(ops_now(), 0);
  pthread_t t;
  pthread_create(&t, NULL, count_ops, x);
  pthread_join(t, NULL);
  assert_int_equal(ops_now(), one);
  tc_release(x);
}

int main(void) {
  setenv("TC_HOT", "1", 1);   /* compile on first sight, in the background */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_handoff_between_threads),
      cmocka_unit_test(test_release_from_other_thread),
      cmocka_unit_test(test_writes_outlive_thread),
      cmocka_unit_test(test_sync_from_other_thread),
      cmocka_unit_test(test_thread_exit_with_open_scopes),
      cmocka_unit_test(test_many_threads_mixed),
      cmocka_unit_test(test_stats_count_every_thread),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
