/*
** worker.c -- the compile workers: libgccjit runs in child processes
** started as compiles need them, so its memory growth, its exit() when
** memory runs out and its crashes stay out of the user's process (issue
** 9). This process only sends requests, waits for answers (with a
** deadline) and dlopens the artifacts; see jit_cpu.h for the contract.
**
** A worker is this build's tc-worker program where one is found, else a
** fork of this process (see "Starting a worker").
**
** A pool of slots, a worker each: a request takes the lowest free slot
** and waits while none is free. A slot's worker is started on demand by
** the first request in it; replaced when it dies, exits, hangs past the
** deadline, has served JCPU_WORKER_MAX_COMPILES or grown by
** JCPU_WORKER_MAX_GROWTH_MB; stopped by jcpu_worker_shutdown at process
** exit, or by itself when this process goes away (EOF on its socket).
*/
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "jcpu_impl.h"

/* -- The protocol ---------------------------------------------------------------
** One request at a time over a SOCK_STREAM socketpair (send with
** MSG_NOSIGNAL: a dead child is an error, never SIGPIPE in the user's
** process). The kernel IR is plain data and travels as the struct. */

#define WMAGIC 0x7463776bu    /* "tcwk" */
#define KEY_MAX 40            /* a key is 32 hex digits */
#define SOURCE_MAX (64u << 20)
#define REASON_MAX 4096u

typedef struct {
  uint32_t magic;
  uint32_t fault;             /* jcpu_fault: testing only */
  uint32_t path_len;          /* bytes of the output path that follow */
  uint32_t limit_ms;          /* the parent's deadline (the child's alarm) */
  char key[KEY_MAX];          /* NUL-terminated */
  kir_kernel k;
} wreq;

/* The first thing a worker says: which build it is. A program of another
** build (an older install found first) reads the IR differently. */
#define WHELLO 0x74636869u    /* "tchi" */
#ifndef TC_BUILD_ID
#define TC_BUILD_ID "unknown"
#endif
typedef struct {
  uint32_t magic;
  uint32_t req_size, resp_size;
  char build[40];             /* TC_BUILD_ID, NUL-terminated */
} whello;

typedef struct {
  uint32_t magic;
  int32_t status;             /* jcpu_status */
  uint32_t reason_len;        /* bytes of the reason that follow */
  uint32_t source_len;        /* then bytes of libgccjit's dump */
  double ms;                  /* compile wall time in the child */
  int64_t growth_kb;          /* the child's RSS now minus at its start */
} wresp;

static void say(char *reason, size_t rlen, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));
static void say(char *reason, size_t rlen, const char *fmt, ...)
{
  if (!reason || rlen == 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, rlen, fmt, ap);
  va_end(ap);
  for (char *c = reason; *c; c++)   /* one line */
    if (*c == '\n')
      *c = ' ';
}

/* The child's side of the socket: read/write exactly n bytes (blocking;
** EINTR retried). read_full: 1 when done, 0 on EOF before the first byte,
** -1 on error or EOF midway. write_full sends with MSG_NOSIGNAL: a worker
** whose parent died mid-compile gets EPIPE, not SIGPIPE, and still
** removes its folder before it leaves. */
static int read_full(int fd, void *p, size_t n)
{
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char *)p + got, n - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return r == 0 && got == 0 ? 0 : -1;
    got += (size_t)r;
  }
  return 1;
}

static int write_full(int fd, const void *p, size_t n)
{
  while (n > 0) {
    ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    p = (const char *)p + r;
    n -= (size_t)r;
  }
  return 0;
}

/* Remove dir and what libgccjit or the driver may have left in it (their
** temporaries: files and libgccjit-* folders); never follows links. */
static void rm_tree(const char *dir, int depth)
{
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
        continue;
      struct stat st;
      if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        continue;
      if (S_ISDIR(st.st_mode) && depth < 4) {
        char sub[4096];
        if (snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name) <
            (int)sizeof sub)
          rm_tree(sub, depth + 1);
      } else {
        unlinkat(dirfd(d), e->d_name, 0);
      }
    }
    closedir(d);
  }
  rmdir(dir);
}

/* -- The child -------------------------------------------------------------------
** tc-worker's main, or a fork of the parent. Forked, only the forking
** thread exists here, and the parent's locks may be held by threads that
** do not: the child touches libgccjit (through jcpu_compile_file), its
** socket (fd 3), its stderr pipe (fds 1 and 2) and its private TMPDIR, and
** leaves with _exit only. */

enum { CHILD_SOCK = 3 };

static long statm_kb(int field)   /* 0: size, 1: resident */
{
  char buf[128] = "";
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  buf[n > 0 ? n : 0] = '\0';
  long v[2] = { 0, 0 };
  if (sscanf(buf, "%ld %ld", &v[0], &v[1]) < 2)
    return 0;
  return v[field] * (sysconf(_SC_PAGESIZE) / 1024);
}

/* exit() in the child (libgccjit's xmalloc on exhaustion, an injected
** fault) must not run the parent's exit handlers or flush the parent's
** stdio buffers a second time: registered last, this runs first. */
static void child_on_exit(int status, void *arg)
{
  (void)arg;
  _exit(status);
}

/* Close every inherited descriptor from `from` up (the user's files and
** sockets must not be held open by the child). */
static void close_from(int from)
{
  if (close_range((unsigned)from, ~0u, 0) == 0)
    return;
  DIR *d = opendir("/proc/self/fd");
  if (d) {
    int fds[1024], n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 1024) {
      int fd = atoi(e->d_name);
      if (fd >= from && fd != dirfd(d))
        fds[n++] = fd;
    }
    closedir(d);
    for (int i = 0; i < n; i++)
      close(fds[i]);
    if (n < 1024)
      return;
  }
  struct rlimit rl;
  long max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536
             ? (long)rl.rlim_cur : 65536;
  for (long fd = from; fd < max; fd++)
    close((int)fd);
}

static void child_setup(int sock, int errfd, const char *dir)
{
  /* The user's handlers and mask are not ours: defaults, nothing blocked
  ** (SIGCHLD too, so the driver can wait for as and ld). Own session: a
  ** terminal's ^C or hangup goes to the user's program, which decides; the
  ** child notices its parent's end as EOF. */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  for (int sig = 1; sig < NSIG; sig++)
    if (sig != SIGKILL && sig != SIGSTOP)
      sigaction(sig, &sa, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  setsid();
  on_exit(child_on_exit, NULL);
  /* fds: 0 /dev/null, 1 and 2 the stderr pipe (as and ld inherit these),
  ** 3 the socket (close-on-exec), nothing else. */
  int s = fcntl(sock, F_DUPFD_CLOEXEC, 100);
  int e = fcntl(errfd, F_DUPFD, 100);
  int null = open("/dev/null", O_RDONLY);
  if (s < 0 || e < 0)
    _exit(2);
  dup2(null >= 0 ? null : e, 0);
  dup2(e, 1);
  dup2(e, 2);
  if (dup3(s, CHILD_SOCK, O_CLOEXEC) < 0)
    _exit(2);
  close_from(CHILD_SOCK + 1);
  /* libgccjit and its driver put their temporaries under TMPDIR (read at
  ** their first use, which is in this process) */
  setenv("TMPDIR", dir, 1);
  jcpu_clear_faults();   /* injections belong to the parent */
}

static void child_fault(uint32_t fault, struct rlimit *saved)
{
  switch (fault) {
  case JCPU_FAULT_CRASH: {
    struct rlimit none = { 0, 0 };
    setrlimit(RLIMIT_CORE, &none);   /* no core file in the user's cwd */
    raise(SIGSEGV);
    break;
  }
  case JCPU_FAULT_KILL:
    raise(SIGKILL);
    break;
  case JCPU_FAULT_EXIT: {
    static const char msg[] = "virtual memory exhausted: Cannot allocate "
                              "memory\n";
    if (write(2, msg, sizeof msg - 1) < 0)
      _exit(3);
    exit(1);
  }
  case JCPU_FAULT_NOMEM: {
    struct rlimit rl = *saved;
    rl.rlim_cur = (rlim_t)statm_kb(0) * 1024;
    setrlimit(RLIMIT_AS, &rl);
    break;
  }
  case JCPU_FAULT_ORPHAN:
    if (fork() == 0) {   /* an `as` that runs on: until killed, or 10 s */
      close(CHILD_SOCK);   /* as and ld never hold it (close-on-exec) */
      alarm(10);
      for (;;)
        pause();
    }
    raise(SIGKILL);
    break;
  case JCPU_FAULT_SLOW:
    nanosleep(&(struct timespec){ 0, 300 * 1000000 }, NULL);
    break;
  case JCPU_FAULT_HANG:
    for (;;)
      pause();
  default:
    break;
  }
}

static _Noreturn void child_main(int sock, int errfd, const char *dir)
{
  child_setup(sock, errfd, dir);
  long rss0 = statm_kb(1);
  whello hi = { WHELLO, sizeof(wreq), sizeof(wresp), TC_BUILD_ID };
  if (write_full(CHILD_SOCK, &hi, sizeof hi) < 0)
    _exit(2);
  static wreq rq;   /* 30 KB: not on the stack of whatever thread forked */
  char path[4096], reason[REASON_MAX];
  for (;;) {
    int r = read_full(CHILD_SOCK, &rq, sizeof rq);
    if (r == 0)
      break;   /* the parent closed the socket, or is gone */
    if (r < 0 || rq.magic != WMAGIC || rq.path_len >= sizeof path ||
        read_full(CHILD_SOCK, path, rq.path_len) != 1)
      _exit(2);
    path[rq.path_len] = '\0';
    rq.key[KEY_MAX - 1] = '\0';
    /* an orphan (the parent killed before it could kill us) still ends */
    alarm(rq.limit_ms / 1000 * 2 + 10);
    struct rlimit as;
    getrlimit(RLIMIT_AS, &as);
    child_fault(rq.fault, &as);
    double t0 = tensor_now_ms();
    char *source = NULL;
    reason[0] = '\0';
    jcpu_status st = jcpu_compile_file(&rq.k, rq.key, path, &source, reason,
                                       sizeof reason);
    wresp a = { WMAGIC, (int32_t)st, (uint32_t)strlen(reason), 0,
                tensor_now_ms() - t0, 0 };
    if (source && strlen(source) < SOURCE_MAX)
      a.source_len = (uint32_t)strlen(source);
    setrlimit(RLIMIT_AS, &as);
    alarm(0);
    a.growth_kb = statm_kb(1) - rss0;
    if (write_full(CHILD_SOCK, &a, sizeof a) < 0 ||
        write_full(CHILD_SOCK, reason, a.reason_len) < 0 ||
        write_full(CHILD_SOCK, source, a.source_len) < 0)
      break;
    free(source);
  }
  rm_tree(dir, 0);
  _exit(0);
}

int jcpu_worker_main(int argc, char **argv)
{
  struct stat st;
  if (argc != 3 || strcmp(argv[1], "--serve") != 0 ||
      fstat(CHILD_SOCK, &st) < 0 || !S_ISSOCK(st.st_mode)) {
    fprintf(stderr, "tc-worker: libtc's compile worker; libtc starts it "
            "(with its socket on fd %d), it is not a command\n", CHILD_SOCK);
    return 2;
  }
  child_main(CHILD_SOCK, STDERR_FILENO, argv[2]);
}

/* -- The parent side ---------------------------------------------------------- */

/* A slot of the pool: one worker and the state of this side of it. A
** thread that takes a free slot (slot_take) holds its lock through the
** request; shutdown and jcpu_worker_pid take it too. */
typedef struct {
  pthread_mutex_t lock;   /* guards the fields */
  pid_t pid;              /* the worker, or 0 */
  int pidfd;              /* pidfd of the worker, or -1 (old kernels) */
  int sock;               /* our end of the socketpair, or -1 */
  int err;                /* read end of the child's stderr, or -1 */
  char dir[4096];         /* its private TMPDIR */
  int compiles;           /* requests it has answered */
  int64_t growth_kb;      /* its RSS growth at the last answer */
  bool retire;            /* replace it before the next request */
  unsigned seq;           /* names of private artifacts */
  char tail[512];         /* the last bytes it wrote to stderr */
  size_t ntail;
} wslot;

/* The pool: up to jcpu_worker_limit() workers, each serving one request at
** a time; a request takes the lowest free slot (so one thread compiling
** alone always talks to the same worker) and waits while none is free. */
static wslot slots[JCPU_WORKERS_MAX];
static struct {
  pthread_mutex_t lock;   /* guards busy[] */
  pthread_cond_t freed;
  bool busy[JCPU_WORKERS_MAX];
} pool = { .lock = PTHREAD_MUTEX_INITIALIZER,
           .freed = PTHREAD_COND_INITIALIZER };
static atomic_int limit_set;   /* jcpu_worker_set_max; 0: the config's */
static atomic_int running;     /* workers started and not yet reaped */

static void slot_clear(wslot *w)
{
  w->pid = 0;
  w->pidfd = w->sock = w->err = -1;
  w->ntail = 0;
  w->compiles = 0;
  w->growth_kb = 0;
  w->retire = false;
}

static pthread_once_t slots_once = PTHREAD_ONCE_INIT;
static void slots_init(void)
{
  for (int i = 0; i < JCPU_WORKERS_MAX; i++) {
    pthread_mutex_init(&slots[i].lock, NULL);
    slot_clear(&slots[i]);
  }
}

int jcpu_worker_limit(void)
{
  int n = atomic_load(&limit_set);
  if (n <= 0)
    n = tensor_cfg()->compile_workers;
  if (n <= 0) {   /* automatic: a worker a core, up to JCPU_WORKERS_AUTO */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    n = cores < 1 ? 1 : cores > JCPU_WORKERS_AUTO ? JCPU_WORKERS_AUTO
                                                   : (int)cores;
  }
  return n < JCPU_WORKERS_MAX ? n : JCPU_WORKERS_MAX;
}

void jcpu_worker_set_max(int n) { atomic_store(&limit_set, n); }

/* The lowest free slot below the limit, locked (waits while all are busy). */
static wslot *slot_take(void)
{
  pthread_once(&slots_once, slots_init);
  pthread_mutex_lock(&pool.lock);
  for (;;) {
    int n = jcpu_worker_limit();
    for (int i = 0; i < n; i++)
      if (!pool.busy[i]) {
        pool.busy[i] = true;
        pthread_mutex_unlock(&pool.lock);
        pthread_mutex_lock(&slots[i].lock);
        return &slots[i];
      }
    pthread_cond_wait(&pool.freed, &pool.lock);
  }
}

static void slot_give(wslot *w)
{
  pthread_mutex_unlock(&w->lock);
  pthread_mutex_lock(&pool.lock);
  pool.busy[w - slots] = false;
  pthread_cond_signal(&pool.freed);
  pthread_mutex_unlock(&pool.lock);
}

typedef enum { IO_OK, IO_TIMEOUT, IO_DEAD } io_rc;

static atomic_int fault_next, timeout_ms, max_compiles, max_growth_mb;
static atomic_bool exiting;
static _Atomic double exit_deadline;   /* monotonic ms; when exiting */

/* How long a request (or a new worker's hello) may take. */
static int request_limit_ms(void)
{
  int limit = atomic_load(&timeout_ms);
  return limit > 0 ? limit : JCPU_WORKER_TIMEOUT_MS;
}

void jcpu_worker_fault_next(jcpu_fault kind) { atomic_store(&fault_next, kind); }

void jcpu_worker_set_timeout(int ms) { atomic_store(&timeout_ms, ms); }

void jcpu_worker_set_limits(int compiles, int growth_mb)
{
  atomic_store(&max_compiles, compiles);
  atomic_store(&max_growth_mb, growth_mb);
}

long jcpu_worker_pid(void)
{
  pthread_once(&slots_once, slots_init);
  long pid = 0;
  for (int i = 0; i < JCPU_WORKERS_MAX && !pid; i++) {
    pthread_mutex_lock(&slots[i].lock);
    pid = slots[i].pid;
    pthread_mutex_unlock(&slots[i].lock);
  }
  return pid;
}

int jcpu_worker_running(void) { return atomic_load(&running); }

/* Keep the last bytes the child wrote to its stderr (its last words when
** it dies: "virtual memory exhausted", an assembler error). */
static void drain_err(wslot *w)
{
  char buf[512];
  ssize_t n;
  while (w->err >= 0 && (n = read(w->err, buf, sizeof buf)) > 0) {
    size_t m = (size_t)n;
    if (m >= sizeof w->tail) {
      memcpy(w->tail, buf + m - sizeof w->tail, sizeof w->tail);
      w->ntail = sizeof w->tail;
      continue;
    }
    if (w->ntail + m > sizeof w->tail) {
      size_t drop = w->ntail + m - sizeof w->tail;
      memmove(w->tail, w->tail + drop, w->ntail - drop);
      w->ntail -= drop;
    }
    memcpy(w->tail + w->ntail, buf, m);
    w->ntail += m;
  }
}

/* The last non-empty line of the child's stderr, into out. */
static void last_words(const wslot *w, char *out, size_t len)
{
  size_t end = w->ntail;
  while (end > 0 && (w->tail[end - 1] == '\n' || w->tail[end - 1] == ' '))
    end--;
  size_t start = end;
  while (start > 0 && w->tail[start - 1] != '\n')
    start--;
  size_t n = end - start < len - 1 ? end - start : len - 1;
  memcpy(out, w->tail + start, n);
  out[n] = '\0';
}

static void signal_worker(wslot *w, int sig)
{
  if (w->pidfd >= 0 &&
      syscall(SYS_pidfd_send_signal, w->pidfd, sig, NULL, 0) == 0)
    return;
  if (w->pidfd < 0)   /* a pidfd that fails means the child is gone */
    kill(w->pid, sig);
}

/* 1 when the worker has ended but is not reaped yet (its pid, and so its
** process group's id, are still ours), 0 while it runs, -1 when someone
** else reaped it (SIGCHLD ignored, a wait(-1) of the user's). */
static int worker_ended(const wslot *w)
{
  siginfo_t si;
  memset(&si, 0, sizeof si);
  if (waitid(P_PID, (id_t)w->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
    return errno == EINTR ? 0 : -1;
  return si.si_pid == w->pid;
}

/* The processes a worker starts (the driver's as and ld) are in its
** process group, the worker being a session leader. Left alive when it is
** killed, they would go on writing into its folder or the store after we
** have cleaned up. Killed while the worker is unreaped, so the group's id
** cannot name anyone else's; then waited for, bounded, until none is
** running (only probed: the id may be free once they are gone). */
static void group_kill(pid_t pgid) { kill(-pgid, SIGKILL); }

/* Is a process of group pgid still running? A zombie is not (it writes
** nothing, and its new parent may take its time to reap it). */
static bool group_running(pid_t pgid)
{
  if (kill(-pgid, 0) < 0)
    return false;   /* the usual case: none left, zombies neither */
  DIR *d = opendir("/proc");
  if (!d)
    return true;
  bool running = false;
  struct dirent *e;
  while (!running && (e = readdir(d)) != NULL) {
    char path[300], buf[512];
    if (e->d_name[0] < '1' || e->d_name[0] > '9')
      continue;
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      continue;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    /* "pid (comm) state ppid pgrp ...": comm may hold anything but the
    ** last ')' */
    char *p = strrchr(buf, ')'), state;
    int pgrp;
    if (p && sscanf(p + 1, " %c %*d %d", &state, &pgrp) == 2)
      running = pgrp == pgid && state != 'Z' && state != 'X';
  }
  closedir(d);
  return running;
}

static void group_wait(pid_t pgid)
{
  double until = tensor_now_ms() + 500;
  while (group_running(pgid) && tensor_now_ms() < until)
    nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
}

/* Wait up to grace_ms for the worker to end, then kill it and what it
** started; reap it, say how it ended (when why is non-NULL), close our
** ends, remove its TMPDIR. */
static void worker_reap(wslot *w, int grace_ms, char *why, size_t wlen)
{
  int status = 0, ended;
  pid_t r;
  double until = tensor_now_ms() + grace_ms;
  while ((ended = worker_ended(w)) == 0 && tensor_now_ms() < until) {
    if (w->pidfd >= 0) {
      struct pollfd p = { w->pidfd, POLLIN, 0 };
      poll(&p, 1, (int)(until - tensor_now_ms()) + 1);
    } else {
      nanosleep(&(struct timespec){ 0, 2000000 }, NULL);
    }
  }
  if (ended == 0)
    signal_worker(w, SIGKILL);
  if (ended >= 0)
    group_kill(w->pid);
  while ((r = waitpid(w->pid, &status, 0)) < 0 && errno == EINTR)
    ;
  if (ended >= 0)
    group_wait(w->pid);
  drain_err(w);
  if (why) {
    char last[200];
    last_words(w, last, sizeof last);
    int n = 0;
    if (r == w->pid && WIFSIGNALED(status))
      n = snprintf(why, wlen, "compile worker died (signal %d)",
                   WTERMSIG(status));
    else if (r == w->pid && WIFEXITED(status))
      n = snprintf(why, wlen, "compile worker exited (status %d)",
                   WEXITSTATUS(status));
    else   /* reaped by someone else (SIGCHLD ignored, a wait(-1)) */
      n = snprintf(why, wlen, "compile worker died");
    if (last[0] && n > 0 && (size_t)n < wlen)
      snprintf(why + n, wlen - (size_t)n, ": %s", last);
    for (char *c = why; *c; c++)   /* one line */
      if (*c == '\n' || *c == '\r')
        *c = ' ';
  }
  close(w->sock);
  close(w->err);
  if (w->pidfd >= 0)
    close(w->pidfd);
  rm_tree(w->dir, 0);
  if (tensor_log_on(TC_LOG_COMPILE))
    tensor_log(TC_LOG_COMPILE, "compile worker %ld stopped after %d "
               "compiles (grew %.1f MB)", (long)w->pid, w->compiles,
               (double)w->growth_kb / 1024);
  slot_clear(w);
  atomic_fetch_sub(&running, 1);
}

/* A process forked by the user must not talk to our worker (they would
** share one socket): it forgets it, and starts its own when it compiles. */
static void atfork_child(void)
{
  pthread_mutex_init(&pool.lock, NULL);
  pthread_cond_init(&pool.freed, NULL);
  atomic_store(&running, 0);
  for (int i = 0; i < JCPU_WORKERS_MAX; i++) {
    wslot *w = &slots[i];
    pthread_mutex_init(&w->lock, NULL);
    pool.busy[i] = false;
    if (w->pid) {
      close(w->sock);
      close(w->err);
      if (w->pidfd >= 0)
        close(w->pidfd);
    }
    slot_clear(w);
  }
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void atfork_register(void) { pthread_atfork(NULL, NULL, atfork_child); }

/* -- Starting a worker -----------------------------------------------------------
** A worker is a new program where this build's tc-worker is found, not a
** fork: a fork copies this process in whatever state its other threads
** left it, and an allocator that does not take its locks across fork
** (ASan's in GCC 12; the user's own atfork handlers likewise) can hand the
** child a lock that a thread which does not exist there holds, so the
** child's first malloc waits forever and the deadline kills it. With the
** pool's threads starting workers side by side that was not rare. A new
** program starts clean; the kernel it builds depends only on the request
** and the settings pinned in its environment (worker_environ).
**
** tc-worker is looked for beside the code that runs this (libtc.so, or a
** program linked with libtc.a), one folder up (programs in a build tree's
** tests/, examples/, bench/), then where `meson install` puts it; the
** first that program_trusted accepts is taken, and is judged again at
** each start. Its hello must name this build (TC_BUILD_ID, made at
** configure time): a program that is no longer trusted, fails to start or
** is of another build is not used again (TC_LOG_ERROR says why), and
** workers are forked, as where none is found. */

#ifndef TC_WORKER_INSTALLED
#define TC_WORKER_INSTALLED "/usr/local/libexec/tc/tc-worker"
#endif

static char program[PATH_MAX];            /* "" : fork */
static pthread_once_t program_once = PTHREAD_ONCE_INIT;
static atomic_bool program_refused;       /* given up: fork from now on */
static char program_override[PATH_MAX];   /* jcpu_worker_set_program */
static atomic_bool program_overridden;

/* Which loaded object holds addr: its name, and whether it is the main
** program (dl_iterate_phdr lists that first, nameless). dladdr would name
** the main program by argv[0], which may be relative to another cwd. */
typedef struct {
  uintptr_t addr;
  int index;
  bool found, is_main;
  char name[PATH_MAX];
} image_query;

static int image_of(struct dl_phdr_info *info, size_t size, void *data)
{
  (void)size;
  image_query *q = data;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = (uintptr_t)info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_LOAD && q->addr >= lo && q->addr < lo + ph->p_memsz) {
      q->found = true;
      q->is_main = q->index == 0 || !info->dlpi_name || !info->dlpi_name[0];
      snprintf(q->name, sizeof q->name, "%s",
               info->dlpi_name ? info->dlpi_name : "");
      return 1;
    }
  }
  q->index++;
  return 0;
}

/* The file that holds this code: libtc.so, or the program itself. */
static bool own_image(char out[PATH_MAX])
{
  image_query q = { .addr = (uintptr_t)own_image };
  dl_iterate_phdr(image_of, &q);
  if (q.found && !q.is_main)
    return realpath(q.name, out) != NULL;
  ssize_t n = readlink("/proc/self/exe", out, PATH_MAX - 1);
  if (n <= 0)
    return false;
  out[n] = '\0';
  return true;
}

/* A program we may run: an executable regular file that we or root own and
** no one else may write, in a folder likewise (a program linked with
** libtc.a in /tmp/x must not run a /tmp/tc-worker another user put there).
** Its real path into real; false with the reason in why. */
static bool program_trusted(const char *path, char real[PATH_MAX],
                            char *why, size_t len)
{
  struct stat st;
  if (!realpath(path, real) || stat(real, &st) < 0) {
    say(why, len, "%s", strerror(errno));
    return false;
  }
  if (!S_ISREG(st.st_mode) || access(real, X_OK) < 0) {
    say(why, len, "not an executable file");
    return false;
  }
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", real);
  char *slash = strrchr(dir, '/');
  if (slash)
    slash[slash == dir] = '\0';   /* "/x" -> "/" */
  for (int i = 0; i < 2; i++) {
    if (i == 1 && stat(dir, &st) < 0) {
      say(why, len, "%s: %s", dir, strerror(errno));
      return false;
    }
    const char *what = i == 0 ? real : dir;
    if (st.st_uid != geteuid() && st.st_uid != 0) {
      say(why, len, "%s is owned by uid %u, neither you nor root", what,
          (unsigned)st.st_uid);
      return false;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
      say(why, len, "%s is writable by group or others", what);
      return false;
    }
  }
  return true;
}

/* path when it exists and is to be trusted (an untrusted one is passed
** over, with a TC_LOG=compile line). */
static bool program_candidate(const char *path)
{
  struct stat st;
  char why[PATH_MAX + 64];
  if (stat(path, &st) < 0)
    return false;
  if (program_trusted(path, program, why, sizeof why))
    return true;
  program[0] = '\0';
  if (tensor_log_on(TC_LOG_COMPILE))
    tensor_log(TC_LOG_COMPILE, "compile worker: passing over %s: %s", path,
               why);
  return false;
}

static void program_find(void)
{
  char image[PATH_MAX], cand[PATH_MAX + 32];
  if (own_image(image)) {
    char *slash = strrchr(image, '/');
    if (slash) {
      *slash = '\0';
      static const char *const rel[] = { "/tc-worker", "/../tc-worker" };
      for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        snprintf(cand, sizeof cand, "%s%s", image, rel[i]);
        if (program_candidate(cand))
          return;
      }
    }
  }
  program_candidate(TC_WORKER_INSTALLED);
}

/* The program to start, or NULL: fork. */
static const char *program_get(void)
{
  if (atomic_load(&program_refused))
    return NULL;
  if (atomic_load(&program_overridden))
    return program_override[0] ? program_override : NULL;
  pthread_once(&program_once, program_find);
  return program[0] ? program : NULL;
}

/* The program is no longer trusted, failed to start or is of another
** build: say so once, and fork from now on. */
static void program_refuse(const char *prog, const char *why)
{
  if (!atomic_exchange(&program_refused, true))
    tensor_log(TC_LOG_ERROR, "%s: %s; forking compile workers instead",
               prog, why);
}

void jcpu_worker_set_program(const char *path)
{
  if (path)
    snprintf(program_override, sizeof program_override, "%s", path);
  atomic_store(&program_overridden, path != NULL);
  atomic_store(&program_refused, false);
}

const char *jcpu_worker_program(void)
{
  const char *p = program_get();
  return p ? p : "";
}

/* The worker's environment: ours, with the settings that shape the code it
** builds pinned to this process's (a program started now would read them
** afresh from an environment the user may have changed), and its private
** TMPDIR (libgccjit and its driver put their temporaries there). NULL when
** out of memory; free with free(). */
static char **worker_environ(const char *dir)
{
  extern char **environ;
  static const char *const pinned[] = { "TMPDIR=", "TC_JIT_OPT=",
                                        "TC_JIT_ISA=", "TC_GCCJIT=" };
  enum { NPIN = sizeof pinned / sizeof pinned[0] };
  size_t n = 0;
  while (environ && environ[n])
    n++;
  const tensor_config *cfg = tensor_cfg();
  char own[NPIN][PATH_MAX + 16];
  int nown = 0;
  snprintf(own[nown++], sizeof own[0], "TMPDIR=%s", dir);
  snprintf(own[nown++], sizeof own[0], "TC_JIT_OPT=%d", cfg->jit_opt);
  snprintf(own[nown++], sizeof own[0], "TC_JIT_ISA=%s", jcpu_target());
  if (cfg->gccjit[0])   /* else the default name, as here */
    snprintf(own[nown++], sizeof own[0], "TC_GCCJIT=%s", cfg->gccjit);
  size_t bytes = (n + NPIN + 1) * sizeof(char *), at = 0;
  for (int i = 0; i < nown; i++)
    bytes += strlen(own[i]) + 1;
  char **env = malloc(bytes);
  if (!env)
    return NULL;
  char *text = (char *)(env + n + NPIN + 1);
  for (size_t i = 0; i < n; i++) {
    bool pin = false;
    for (int j = 0; j < NPIN; j++)
      pin |= strncmp(environ[i], pinned[j], strlen(pinned[j])) == 0;
    if (!pin)
      env[at++] = environ[i];
  }
  for (int i = 0; i < nown; i++) {
    env[at++] = strcpy(text, own[i]);
    text += strlen(own[i]) + 1;
  }
  env[at] = NULL;
  return env;
}

/* Start tc-worker with the socket on fd 3, the stderr pipe on 1 and 2,
** /dev/null on 0, default signals, nothing blocked, its own session (a
** terminal's ^C goes to the user's program, which decides). sock and errfd
** are at 10 or above, so no dup2 below meets itself. The pid, or -1 with
** errno set. */
static pid_t spawn_program(const char *prog, int sock, int errfd,
                           const char *dir)
{
  char **env = worker_environ(dir);
  if (!env) {
    errno = ENOMEM;
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, errfd, 1);
  posix_spawn_file_actions_adddup2(&fa, errfd, 2);
  posix_spawn_file_actions_adddup2(&fa, sock, CHILD_SOCK);
  posix_spawnattr_init(&at);
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&at, &all);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF |
                                POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSID);
  char *argv[] = { (char *)"tc-worker", (char *)"--serve", (char *)dir,
                   NULL };
  pid_t pid;
  int rc = posix_spawn(&pid, prog, &fa, &at, argv, env);
  posix_spawnattr_destroy(&at);
  posix_spawn_file_actions_destroy(&fa);
  free(env);
  if (rc != 0) {
    errno = rc;
    return -1;
  }
  return pid;
}

static pid_t fork_child(int sock, int errfd, const char *dir)
{
  /* no thread of ours is inside libgccjit while the child is made */
  jcpu_compile_lock();
  pid_t pid = fork();
  if (pid == 0)
    child_main(sock, errfd, dir);
  int err = errno;
  jcpu_compile_unlock();
  errno = err;
  return pid;
}

static int worker_dir(wslot *w, char *reason, size_t rlen)
{
  /* its private TMPDIR: under $TMPDIR, else /tmp (as libiberty's
  ** choose_tmpdir falls back when TMPDIR is not writable) */
  const char *tmp = getenv("TMPDIR");
  snprintf(w->dir, sizeof w->dir, "%s/tc-jit-XXXXXX",
           tmp && *tmp ? tmp : "/tmp");
  if (mkdtemp(w->dir))
    return 0;
  snprintf(w->dir, sizeof w->dir, "/tmp/tc-jit-XXXXXX");
  if (mkdtemp(w->dir))
    return 0;
  say(reason, rlen, "cannot start the compile worker: %s: %s", w->dir,
      strerror(errno));
  return -1;
}

static io_rc recv_all(wslot *w, void *p, size_t n, double deadline);

/* Wait for the new worker's hello; 0 when it is this build's. */
static int worker_hello(wslot *w, char *reason, size_t rlen)
{
  int limit = request_limit_ms();
  whello hi;
  io_rc io = recv_all(w, &hi, sizeof hi, tensor_now_ms() + limit);
  if (io == IO_OK) {
    hi.build[sizeof hi.build - 1] = '\0';
    if (hi.magic == WHELLO && hi.req_size == sizeof(wreq) &&
        hi.resp_size == sizeof(wresp) && strcmp(hi.build, TC_BUILD_ID) == 0)
      return 0;
    signal_worker(w, SIGKILL);
    worker_reap(w, 0, NULL, 0);
    say(reason, rlen, "the compile worker is of another build (%s, this is "
        "%s)", hi.magic == WHELLO ? hi.build : "?", TC_BUILD_ID);
  } else if (io == IO_TIMEOUT) {
    signal_worker(w, SIGKILL);
    worker_reap(w, 0, NULL, 0);
    if (atomic_load(&exiting))
      say(reason, rlen, "compile cancelled: the process is exiting");
    else
      say(reason, rlen, "the compile worker did not start in %d ms", limit);
  } else {
    worker_reap(w, 1000, reason, rlen);
  }
  return -1;
}

static int worker_start(wslot *w, char *reason, size_t rlen)
{
  pthread_once(&atfork_once, atfork_register);
  jcpu_target();                /* initialized before fork, never in it */
  const char *prog = program_get();
  char real[PATH_MAX];
  if (prog && !program_trusted(prog, real, reason, rlen)) {
    program_refuse(prog, reason);
    prog = NULL;
  } else if (prog) {
    prog = real;
  }
  if (worker_dir(w, reason, rlen) < 0)
    return -1;
  int sv[2], ep[2] = { -1, -1 };
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
    say(reason, rlen, "cannot start the compile worker: socketpair: %s",
        strerror(errno));
    rmdir(w->dir);
    return -1;
  }
  if (pipe2(ep, O_CLOEXEC) < 0) {
    say(reason, rlen, "cannot start the compile worker: pipe: %s",
        strerror(errno));
    close(sv[0]);
    close(sv[1]);
    rmdir(w->dir);
    return -1;
  }
  /* the child's ends at 10 or above (spawn_program's dup2s) */
  int cs = fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
  int ce = cs < 0 ? -1 : fcntl(ep[1], F_DUPFD_CLOEXEC, 10);
  int err = errno;
  close(sv[1]);
  close(ep[1]);
  double t0 = tensor_now_ms();
  pid_t pid = -1;
  if (ce >= 0) {
    pid = prog ? spawn_program(prog, cs, ce, w->dir)
               : fork_child(cs, ce, w->dir);
    err = errno;
  }
  double start_ms = tensor_now_ms() - t0;
  if (cs >= 0)
    close(cs);
  if (ce >= 0)
    close(ce);
  if (pid < 0) {
    say(reason, rlen, "cannot start the compile worker: %s%s: %s",
        prog ? "" : "fork", prog ? prog : "", strerror(err));
    close(sv[0]);
    close(ep[0]);
    rmdir(w->dir);
    if (prog) {
      program_refuse(prog, reason);
      return worker_start(w, reason, rlen);
    }
    return -1;
  }
  fcntl(ep[0], F_SETFL, O_NONBLOCK);
  slot_clear(w);
  atomic_fetch_add(&running, 1);
  w->pid = pid;
  w->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  w->sock = sv[0];
  w->err = ep[0];
  if (worker_hello(w, reason, rlen) < 0) {
    if (prog && !atomic_load(&exiting)) {   /* not for a cancelled wait */
      program_refuse(prog, reason);
      return worker_start(w, reason, rlen);
    }
    return -1;
  }
  if (rlen)
    reason[0] = '\0';   /* a program given up on the way is no failure */
  if (tensor_log_on(TC_LOG_COMPILE))
    tensor_log(TC_LOG_COMPILE, "compile worker %ld started (%s %.2f ms, "
               "hello %.2f ms)", (long)pid, prog ? "exec" : "fork", start_ms,
               tensor_now_ms() - t0);
  return 0;
}

/* Until when may the request in flight run: its own deadline, or the exit
** grace once jcpu_worker_shutdown has begun. */
static double request_until(double deadline)
{
  if (atomic_load(&exiting)) {
    double e = atomic_load(&exit_deadline);
    if (e < deadline)
      return e;
  }
  return deadline;
}

/* Wait (polling the child's stderr too) until fd is ready for `ev` or the
** child is gone. 1 ready, 0 past the deadline, -1 the child is gone. */
static int wait_ready(wslot *w, int fd, short ev, double deadline)
{
  for (;;) {
    double left = request_until(deadline) - tensor_now_ms();
    if (left <= 0)
      return 0;
    struct pollfd p[3] = { { fd, ev, 0 }, { w->err, POLLIN, 0 },
                           { w->pidfd, POLLIN, 0 } };
    int np = w->pidfd >= 0 ? 3 : 2;
    /* slices, so an exit that begins meanwhile is seen */
    int r = poll(p, (nfds_t)np, left < 50 ? (int)left + 1 : 50);
    if (r < 0 && errno != EINTR)
      return -1;
    if (p[1].revents)
      drain_err(w);
    if (p[1].revents & (POLLHUP | POLLERR | POLLNVAL)) {
      close(w->err);   /* drained; do not spin on it */
      w->err = -1;
    }
    if (p[0].revents & ev)
      return 1;
    if (p[0].revents & (POLLHUP | POLLERR | POLLNVAL))
      return -1;
    if (np == 3 && (p[2].revents & POLLIN))
      return -1;   /* exited, and nothing left to read */
  }
}

static io_rc send_all(wslot *w, const void *p, size_t n, double deadline)
{
  while (n > 0) {
    ssize_t r = send(w->sock, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r > 0) {
      p = (const char *)p + r;
      n -= (size_t)r;
      continue;
    }
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 && errno != EAGAIN)
      return IO_DEAD;
    int ready = wait_ready(w, w->sock, POLLOUT, deadline);
    if (ready <= 0)
      return ready == 0 ? IO_TIMEOUT : IO_DEAD;
  }
  return IO_OK;
}

static io_rc recv_all(wslot *w, void *p, size_t n, double deadline)
{
  while (n > 0) {
    ssize_t r = recv(w->sock, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p = (char *)p + r;
      n -= (size_t)r;
      continue;
    }
    if (r == 0)
      return IO_DEAD;
    if (errno == EINTR)
      continue;
    if (errno != EAGAIN)
      return IO_DEAD;
    int ready = wait_ready(w, w->sock, POLLIN, deadline);
    if (ready <= 0)
      return ready == 0 ? IO_TIMEOUT : IO_DEAD;
  }
  return IO_OK;
}

/* One request/answer with the running worker. On success *source is the
** dump (malloc'd or NULL) and *ms the child's compile time. */
static jcpu_status request(wslot *w, const kir_kernel *k, const char *key,
                           const char *path, jcpu_fault fault, char **source,
                           double *ms, char *reason, size_t rlen)
{
  int limit = request_limit_ms();
  double t0 = tensor_now_ms(), deadline = t0 + limit;
  size_t plen = strlen(path);
  wreq *rq = malloc(sizeof *rq);
  if (!rq) {
    say(reason, rlen, "out of memory");
    return JCPU_E_COMPILE;
  }
  memset(rq, 0, offsetof(wreq, k));
  rq->magic = WMAGIC;
  rq->fault = (uint32_t)fault;
  rq->path_len = (uint32_t)plen;
  rq->limit_ms = (uint32_t)limit;
  snprintf(rq->key, sizeof rq->key, "%s", key);
  kir_copy(&rq->k, k);
  io_rc io = send_all(w, rq, sizeof *rq, deadline);
  free(rq);
  if (io == IO_OK)
    io = send_all(w, path, plen, deadline);
  wresp a;
  if (io == IO_OK)
    io = recv_all(w, &a, sizeof a, deadline);
  if (io == IO_OK && (a.magic != WMAGIC || a.reason_len >= REASON_MAX ||
                      a.source_len > SOURCE_MAX))
    io = IO_DEAD;
  char *text = NULL;
  if (io == IO_OK) {
    text = malloc((size_t)a.reason_len + a.source_len + 2);
    io = text ? recv_all(w, text, (size_t)a.reason_len + a.source_len, deadline)
              : IO_DEAD;
  }
  if (io != IO_OK) {
    free(text);
    if (io == IO_TIMEOUT) {
      bool cut = request_until(deadline) < deadline;
      signal_worker(w, SIGKILL);
      worker_reap(w, 0, NULL, 0);
      if (cut)
        say(reason, rlen, "compile cancelled: the process is exiting");
      else
        say(reason, rlen, "compile took longer than %d ms; worker killed",
            limit);
    } else {
      worker_reap(w, 1000, reason, rlen);
    }
    return JCPU_E_WORKER;
  }
  /* bounded memory there too: replace it before the next request */
  int nmax = atomic_load(&max_compiles), mb = atomic_load(&max_growth_mb);
  w->compiles++;
  if (w->compiles >= (nmax > 0 ? nmax : JCPU_WORKER_MAX_COMPILES) ||
      a.growth_kb > (int64_t)(mb > 0 ? mb : JCPU_WORKER_MAX_GROWTH_MB) * 1024)
    w->retire = true;
  w->growth_kb = a.growth_kb;
  *ms = a.ms;
  if (a.status != JCPU_OK) {
    say(reason, rlen, "%.*s", (int)a.reason_len, text);
    free(text);
    return a.status == JCPU_E_UNSUPPORTED ? JCPU_E_UNSUPPORTED
                                          : JCPU_E_COMPILE;
  }
  if (a.source_len) {
    memmove(text, text + a.reason_len, a.source_len);
    text[a.source_len] = '\0';
    *source = text;
  } else {
    free(text);
  }
  return JCPU_OK;
}

jcpu_status jcpu_worker_compile(const kir_kernel *k, const char *key,
                                const char *so_path, jcpu_kernel **out,
                                char *reason, size_t rlen)
{
  *out = NULL;
  if (jcpu_take_fault()) {
    say(reason, rlen, "injected compile failure");
    return JCPU_E_COMPILE;
  }
  char why[160];
  if (jcpu_check(k, why, sizeof why) < 0) {   /* no worker needed for that */
    say(reason, rlen, "unsupported kernel: %s", why);
    return JCPU_E_UNSUPPORTED;
  }
  if (!key || strlen(key) >= KEY_MAX) {
    say(reason, rlen, "bad kernel key");
    return JCPU_E_COMPILE;
  }
  wslot *w = slot_take();
  /* an injected fault belongs to the request that took a slot next */
  jcpu_fault fault = atomic_exchange(&fault_next, JCPU_FAULT_NONE);
  jcpu_status st = JCPU_E_WORKER;
  char priv[4200];
  const char *path = so_path;
  char *source = NULL;
  double ms = 0;
  if (atomic_load(&exiting)) {
    say(reason, rlen, "compile cancelled: the process is exiting");
    goto out;
  }
  if (w->pid && w->retire) {   /* EOF: it cleans up and leaves */
    shutdown(w->sock, SHUT_WR);
    worker_reap(w, 500, NULL, 0);
  }
  if (!w->pid && worker_start(w, reason, rlen) < 0)
    goto out;
  if (!path) {   /* no store: a private file, gone once loaded */
    snprintf(priv, sizeof priv, "%s/k%u-%s.so", w->dir, w->seq++, key);
    path = priv;
  }
  st = request(w, k, key, path, fault, &source, &ms, reason, rlen);
  if (st == JCPU_OK && (st = jcpu_load(k, key, path, out, reason, rlen)) ==
                       JCPU_OK) {
    jcpu_kernel_adopt(*out, source, ms);
    source = NULL;
  }
  if (path == priv)
    unlink(priv);
out:
  slot_give(w);
  free(source);
  return st;
}

void jcpu_worker_shutdown(int grace_ms)
{
  if (!atomic_load(&exiting)) {
    atomic_store(&exit_deadline, tensor_now_ms() + grace_ms);
    atomic_store(&exiting, true);
  }
  pthread_once(&slots_once, slots_init);
  /* Requests in flight end by the deadline (then their workers are
  ** killed); wait for them, but never without bound. */
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += grace_ms / 1000 + 3;
  for (int i = 0; i < JCPU_WORKERS_MAX; i++) {
    wslot *w = &slots[i];
    if (pthread_mutex_timedlock(&w->lock, &until) != 0)
      continue;
    if (w->pid) {
      /* EOF tells an idle worker to clean up and leave */
      shutdown(w->sock, SHUT_WR);
      worker_reap(w, 500, NULL, 0);
    }
    pthread_mutex_unlock(&w->lock);
  }
}
