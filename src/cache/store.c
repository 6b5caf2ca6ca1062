/*
** store.c -- the on-disk kernel store (store.h): content-named artifacts,
** one .meta per key, every write a temp file renamed into place, and every
** read checked (file types, ownership, permissions, size, key-bound
** checksum, key marker) before use.
*/
#define XXH_STATIC_LINKING_ONLY
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "store.h"
#include "../tensor/tensor.h"

#define META_MAX (16u << 20)  /* a bigger .meta is not one of ours */
#define GRACE_S 60            /* orphans/temps younger than this may be a
                                 put in flight in another process */
#define NOT_REG (-2)          /* open_reg: the name is not a regular file */
#define MARKER_LEN (sizeof STORE_KEY_MARKER - 1 + STORE_KEY_LEN + 1)

/* Recursive: put calls prune, and store_each callbacks may call back in. */
static pthread_mutex_t mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

/* What this process knows of the store's size: the total its last scan
** found (after evicting), plus the bytes it has put since. A scan reads
** every meta (linear in the entries: 266 took 40-90 ms on the dev machine,
** so a full store of small kernels takes seconds), so a put scans only
** when that sum passes the cap, or when this
** process alone has put a sixteenth of the cap since its last scan (other
** processes grow the store too: the cap holds to within what they put
** meanwhile). The first put of a process, or after store_open, scans. */
static struct {
  bool known;
  uint64_t bytes, since;
} sized;
static char root_dir[PATH_MAX];   /* "<root>/v2"; empty when closed */
static bool marker_required = STORE_MARKER_REQUIRED;

/* -- Small helpers --------------------------------------------------------- */

/* One TC_LOG=cache line (gated like every other category). */
static void logc(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logc(const char *fmt, ...)
{
  if (!tensor_log_on(TC_LOG_CACHE))
    return;
  char line[480];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  tensor_log(TC_LOG_CACHE, "%s", line);
}

/* A report line for tc-dump (report may be NULL). */
static void say(FILE *report, const char *fmt, ...)
  __attribute__((format(printf, 2, 3)));
static void say(FILE *report, const char *fmt, ...)
{
  if (!report)
    return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(report, fmt, ap);
  va_end(ap);
}

static bool is_hex(const char *s, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
      return false;
  return s[n] == '\0';
}

static void hex128(XXH128_hash_t h, char out[STORE_KEY_LEN + 1])
{
  snprintf(out, STORE_KEY_LEN + 1, "%016" PRIx64 "%016" PRIx64,
           (uint64_t)h.high64, (uint64_t)h.low64);
}

/* Ours and not writable by anyone else: the only files we trust. */
static bool safe(const struct stat *st)
{
  return st->st_uid == geteuid() && !(st->st_mode & (S_IWGRP | S_IWOTH));
}

static bool same_file(const struct stat *a, const struct stat *b)
{
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

static int64_t mtime_ns(const struct stat *st)
{
  return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

/* What lstat saw, in words, for reports. */
static const char *type_name(mode_t m)
{
  return S_ISLNK(m) ? "a symbolic link" : S_ISFIFO(m) ? "a FIFO"
         : S_ISDIR(m) ? "a directory" : S_ISSOCK(m) ? "a socket"
         : S_ISCHR(m) || S_ISBLK(m) ? "a device" : "not a regular file";
}

/* Format into buf; -1 when it does not fit (a cut path is a wrong path). */
static int fmt(char *buf, size_t len, const char *f, ...)
  __attribute__((format(printf, 3, 4)));
static int fmt(char *buf, size_t len, const char *f, ...)
{
  va_list ap;
  va_start(ap, f);
  int n = vsnprintf(buf, len, f, ap);
  va_end(ap);
  return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* Open path read-only, but only a regular file: judged by lstat first (so
** a FIFO, device, directory or link is never opened at all), then opened
** with O_NOFOLLOW | O_NONBLOCK (a name swapped meanwhile can neither be
** followed nor block us) and judged again by fstat. Returns the fd with
** *st the file opened; NOT_REG with *st the thing found; -1 with errno
** (ENOENT: nothing there). */
static int open_reg(const char *path, struct stat *st)
{
  if (lstat(path, st) < 0)
    return -1;
  if (!S_ISREG(st->st_mode))
    return NOT_REG;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return errno == ELOOP ? NOT_REG : -1;
  if (fstat(fd, st) < 0) {
    close(fd);
    return -1;
  }
  if (!S_ISREG(st->st_mode)) {
    close(fd);
    return NOT_REG;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0)
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

/* Read all n bytes of a regular file (n from its fstat). */
static char *read_all(int fd, size_t n)
{
  char *buf = malloc(n + 1);
  if (!buf)
    return NULL;
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {              /* shrank under us, or an I/O error */
      free(buf);
      return NULL;
    }
    got += (size_t)r;
  }
  buf[n] = '\0';
  return buf;
}

/* A directory we may use: a real one (not a link), ours, closed to others. */
static bool safe_dir(const char *path, struct stat *st)
{
  return lstat(path, st) == 0 && S_ISDIR(st->st_mode) && safe(st);
}

/* mkdir -p with mode 0700 for every directory it creates. */
static int mkdirs(const char *path)
{
  char p[PATH_MAX];
  if (fmt(p, sizeof p, "%s", path) < 0)
    return -1;
  for (char *s = p + 1; *s; s++)
    if (*s == '/') {
      *s = '\0';
      if (mkdir(p, 0700) < 0 && errno != EEXIST)
        return -1;
      *s = '/';
    }
  return mkdir(p, 0700) < 0 && errno != EEXIST ? -1 : 0;
}

/* "<root_dir>/<kk>" for a well-formed key; -1 otherwise (keys name files,
** so a malformed one must never reach a path). */
static int key_dir(const char *key, char *dir, size_t len)
{
  if (!key || !is_hex(key, STORE_KEY_LEN) || !root_dir[0])
    return -1;
  return fmt(dir, len, "%s/%.2s", root_dir, key);
}

/* The key's directory, created if needed, and safe to use. */
static int key_dir_make(const char *key, char *dir, size_t len)
{
  struct stat st;
  if (key_dir(key, dir, len) < 0)
    return -1;
  if (mkdir(dir, 0700) < 0 && errno != EEXIST)
    return -1;
  if (!safe_dir(dir, &st)) {
    logc("%s: not a private directory; not used", dir);
    return -1;
  }
  return 0;
}

/* Create a fresh temp file in dir (O_EXCL, 0600): names are unique across
** processes (pid), threads (counter) and pid reuse (random). */
static int tmp_open(const char *dir, char *path, size_t len)
{
  static unsigned counter;
  for (int tries = 0; tries < 16; tries++) {
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
      r = (uint64_t)clock() ^ ((uint64_t)time(NULL) << 20);
    unsigned c = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
    if (fmt(path, len, "%s/.tmp-%ld-%u-%016" PRIx64, dir, (long)getpid(), c,
            r) < 0)
      return -1;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                  0600);
    if (fd >= 0 || errno != EEXIST)
      return fd;
  }
  return -1;
}

static int write_all(int fd, const char *p, size_t n)
{
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Write data to dest through a temp file in dir + rename(2): readers see
** the old file or the new one, never a part. No temp survives a failure. */
static int write_atomic(const char *dir, const char *dest, const char *data,
                        size_t n)
{
  char tmp[PATH_MAX];
  int fd = tmp_open(dir, tmp, sizeof tmp);
  if (fd < 0)
    return -1;
  int rc = write_all(fd, data, n);
  if (close(fd) < 0)
    rc = -1;
  if (rc == 0 && rename(tmp, dest) < 0)
    rc = -1;
  if (rc < 0)
    unlink(tmp);
  return rc;
}

/* An artifact's file name ends in its backend's extension: a shared
** object for the CPU, a cubin (plus the key marker, store.h) for CUDA. */
static const char *artifact_ext(const char *backend)
{
  return strcmp(backend, "cuda") == 0 ? ".cubin" : ".so";
}

/* The checksum of an artifact: xxh3-128 of its key's digits, then its
** bytes. Binding the key in means a copy under another key fails. */
static void artifact_sum(const char *key, const void *bytes, size_t n,
                         char sum[STORE_KEY_LEN + 1])
{
  XXH3_state_t st;
  XXH3_INITSTATE(&st);
  XXH3_128bits_reset(&st);
  XXH3_128bits_update(&st, key, STORE_KEY_LEN);
  XXH3_128bits_update(&st, bytes, n);
  hex128(XXH3_128bits_digest(&st), sum);
}

/* Is every key marker in the artifact this key's, and (when required) is
** there one? NULL when so, else the reason in why. A "tc-kernel-key:" not
** followed by 32 hex digits and a NUL is not a marker (just bytes). */
static const char *marker_problem(const char *bytes, size_t n,
                                  const char *key, char *why, size_t wlen)
{
  const size_t plen = sizeof STORE_KEY_MARKER - 1;
  bool found = false;
  for (const char *p = bytes, *end = bytes + n;
       (p = memmem(p, (size_t)(end - p), STORE_KEY_MARKER, plen));
       p += plen) {
    if ((size_t)(end - p) < MARKER_LEN || p[MARKER_LEN - 1] != '\0' ||
        !is_hex(p + plen, STORE_KEY_LEN))
      continue;
    if (memcmp(p + plen, key, STORE_KEY_LEN) != 0) {
      snprintf(why, wlen, "artifact carries the key marker of kernel %.32s",
               p + plen);
      return why;
    }
    found = true;
  }
  if (!found && marker_required) {
    snprintf(why, wlen, "artifact carries no key marker");
    return why;
  }
  return NULL;
}

bool store_artifact_has_key(const void *bytes, size_t n, const char *key)
{
  char want[MARKER_LEN];
  if (!bytes || !key || !is_hex(key, STORE_KEY_LEN))
    return false;
  memcpy(want, STORE_KEY_MARKER, sizeof STORE_KEY_MARKER - 1);
  memcpy(want + sizeof STORE_KEY_MARKER - 1, key, STORE_KEY_LEN + 1);
  return memmem(bytes, n, want, sizeof want) != NULL;
}

bool store_require_marker(bool on)
{
  pthread_mutex_lock(&mu);
  bool was = marker_required;
  marker_required = on;
  pthread_mutex_unlock(&mu);
  return was;
}

/* Remove path, but only if it is still the file we judged (st): another
** process may have renamed a fresh entry over it since. The file is moved
** aside atomically first; a newer one moved aside by mistake goes back
** unless yet another has arrived meanwhile. A directory is only ever
** rmdir'ed (so only when empty). Nothing is opened. 0, or -1 (errno) when
** the name could not be removed. */
static int remove_if_same(const char *dir, const char *path,
                          const struct stat *st)
{
  if (S_ISDIR(st->st_mode))
    return rmdir(path);
  char aside[PATH_MAX];
  int fd = tmp_open(dir, aside, sizeof aside);
  if (fd < 0)
    return unlink(path) < 0 && errno != ENOENT ? -1 : 0;
  close(fd);
  struct stat now;
  if (rename(path, aside) < 0) {
    int err = errno;
    unlink(aside);
    errno = err;
    return err == ENOENT ? 0 : -1;
  }
  if (lstat(aside, &now) < 0 || same_file(&now, st) ||
      renameat2(AT_FDCWD, aside, AT_FDCWD, path, RENAME_NOREPLACE) < 0)
    unlink(aside);
  return 0;
}

/* Remove a name whatever it is, without opening or following it: unlink,
** or rmdir for an (empty) directory. 0 or -1 (errno). */
static int remove_name(const char *path)
{
  struct stat st;
  if (lstat(path, &st) < 0)
    return errno == ENOENT ? 0 : -1;
  int rc = S_ISDIR(st.st_mode) ? rmdir(path) : unlink(path);
  return rc < 0 && errno != ENOENT ? -1 : 0;
}

/* -- Keys and metadata ----------------------------------------------------- */

void store_key(const char *ir_text, const char *backend, const char *target,
               const char *compiler, char key[STORE_KEY_LEN + 1])
{
  /* Each part ends with a NUL, which no part contains: ("ab","c") and
  ** ("a","bc") hash different byte strings. */
  const char *part[] = { ir_text, backend, target, compiler,
                         STORE_CODEGEN_VERSION };
  XXH3_state_t st;
  XXH3_INITSTATE(&st);
  XXH3_128bits_reset(&st);
  for (size_t i = 0; i < sizeof part / sizeof part[0]; i++) {
    const char *p = part[i] ? part[i] : "";
    XXH3_128bits_update(&st, p, strlen(p) + 1);
  }
  hex128(XXH3_128bits_digest(&st), key);
}

void store_meta_free(store_meta *m)
{
  if (!m)
    return;
  free(m->ir);
  free(m->source);
  free(m->guards);
  m->ir = m->source = m->guards = NULL;
}

/* ORDER META_FIELDS: meta_format writes the names META_FIELDS lists, which
** meta_parse requires. */
static char *meta_format(const store_meta *m, size_t *n)
{
  char *buf = NULL;
  FILE *f = open_memstream(&buf, n);
  if (!f)
    return NULL;
  /* A value is one line of printable text: a control character (a
  ** newline would end the header) becomes a space. Each field is a
  ** bounded array, so no line exceeds STORE_LINE_MAX. */
#define STR(name)                                                          \
  do {                                                                     \
    fputs(#name ": ", f);                                                  \
    for (const char *p = m->name; p < m->name + sizeof m->name - 1 && *p;  \
         p++)                                                              \
      fputc((unsigned char)*p < 0x20 || *p == 0x7f ? ' ' : *p, f);         \
    fputc('\n', f);                                                        \
  } while (0)
  STR(key); STR(artifact); STR(checksum);
  fprintf(f, "bytes: %" PRIu64 "\n", m->bytes);
  STR(backend); STR(target); STR(compiler); STR(codegen); STR(kind);
  STR(shape); STR(regions); STR(ops);
#undef STR
  fprintf(f, "instrs: %d\ncompile_ms: %.3f\ncreated: %" PRId64 "\n"
          "last_used: %" PRId64 "\nhits: %" PRIu64 "\n\n", m->instrs,
          m->compile_ms, m->created, m->last_used, m->hits);
  /* Each section's text gets one newline added, which the parser strips,
  ** so any text (with or without a final newline) reads back exactly. */
  const char *sec[] = { "ir", "source", "guards" };
  const char *txt[] = { m->ir, m->source, m->guards };
  for (int i = 0; i < 3; i++)
    if (txt[i])
      fprintf(f, "--- %s ---\n%s\n", sec[i], txt[i]);
  if (fclose(f) != 0) {
    free(buf);
    return NULL;
  }
  return buf;
}

/* A whole decimal number in [lo, hi]. */
static int num_i64(const char *v, int64_t lo, int64_t hi, int64_t *out)
{
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi)
    return -1;
  *out = x;
  return 0;
}

static int num_u64(const char *v, uint64_t *out)
{
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || end == v || *end || *v == '-' || *v == '+' || *v == ' ')
    return -1;
  *out = x;
  return 0;
}

/* ORDER META_FIELDS. Each header name, and its bit in meta_parse's mask. */
#define META_FIELDS(X)                                                     \
  X(KEY, key) X(ARTIFACT, artifact) X(CHECKSUM, checksum) X(BYTES, bytes)   \
  X(BACKEND, backend) X(TARGET, target) X(COMPILER, compiler)              \
  X(CODEGEN, codegen) X(KIND, kind) X(SHAPE, shape) X(REGIONS, regions)    \
  X(OPS, ops) X(INSTRS, instrs) X(COMPILE_MS, compile_ms)                  \
  X(CREATED, created) X(LAST_USED, last_used) X(HITS, hits)
enum {
#define X(id, name) F_##id,
  META_FIELDS(X)
#undef X
  NFIELDS
};
static const char *const field_name[NFIELDS] = {
#define X(id, name) #name,
  META_FIELDS(X)
#undef X
};
#define TIME_MAX ((int64_t)1 << 40)   /* seconds: about 35000 years */
#define INSTRS_MAX (1 << 20)          /* far above any kernel IR */

/* One header line's value into m; -1 when it is malformed or absurd. */
static int meta_field(store_meta *m, int f, const char *v)
{
  int64_t x;
  switch (f) {
#define STR(id, name)                                                      \
  case F_##id:                                                             \
    return fmt(m->name, sizeof m->name, "%s", v);
  STR(ARTIFACT, artifact) STR(BACKEND, backend) STR(TARGET, target)
  STR(COMPILER, compiler) STR(CODEGEN, codegen) STR(KIND, kind)
  STR(SHAPE, shape) STR(REGIONS, regions) STR(OPS, ops)
#undef STR
  case F_KEY:
  case F_CHECKSUM:
    if (!is_hex(v, STORE_KEY_LEN))
      return -1;
    memcpy(f == F_KEY ? m->key : m->checksum, v, STORE_KEY_LEN + 1);
    return 0;
  case F_BYTES:
    return num_u64(v, &m->bytes) < 0 || m->bytes > STORE_ARTIFACT_MAX ? -1
                                                                     : 0;
  case F_INSTRS:
    if (num_i64(v, 0, INSTRS_MAX, &x) < 0)
      return -1;
    m->instrs = (int)x;
    return 0;
  case F_COMPILE_MS: {
    char *end;
    errno = 0;
    m->compile_ms = strtod(v, &end);
    return errno || end == v || *end || !isfinite(m->compile_ms) ||
           m->compile_ms < 0 || m->compile_ms > 1e9 ? -1 : 0;
  }
  case F_CREATED:
    return num_i64(v, 0, TIME_MAX, &m->created);
  case F_LAST_USED:
    return num_i64(v, 0, TIME_MAX, &m->last_used);
  case F_HITS:
    return num_u64(v, &m->hits);
  }
  return -1;
}

/* Parse a whole .meta (text is modified). -1 unless it is well formed:
** every line bounded and printable, every field present once and sane,
** and the artifact the one name its key and checksum allow. */
static int meta_parse(char *text, store_meta *m)
{
  memset(m, 0, sizeof *m);
  unsigned seen = 0;
  char *line = text, *nl;
  for (; (nl = strchr(line, '\n')) && nl != line; line = nl + 1) {
    if (nl - line >= STORE_LINE_MAX)
      return -1;
    *nl = '\0';
    for (const char *p = line; *p; p++)
      if ((unsigned char)*p < 0x20 || *p == 0x7f)
        return -1;
    char *colon = strstr(line, ": ");
    if (!colon)
      return -1;
    *colon = '\0';
    int f = 0;
    while (f < NFIELDS && strcmp(line, field_name[f]) != 0)
      f++;
    if (f == NFIELDS)
      continue;                /* a newer writer's field: ignored */
    if (seen & (1u << f) || meta_field(m, f, colon + 2) < 0)
      return -1;
    seen |= 1u << f;
  }
  if (!nl || seen != (1u << NFIELDS) - 1)
    return -1;
  /* The artifact name is derived, never trusted: no "../" can get in. */
  char want[sizeof m->artifact];
  snprintf(want, sizeof want, "%s-%s%s", m->key, m->checksum,
           artifact_ext(m->backend));
  if (strcmp(want, m->artifact) != 0)
    return -1;
  /* Sections: the three known marker lines; anything else is content. */
  static const char *const mark[] = { "--- ir ---\n", "--- source ---\n",
                                      "--- guards ---\n" };
  char **dst[] = { &m->ir, &m->source, &m->guards };
  char *p = nl + 1;
  int cur = -1;
  char *start = NULL;
  for (;;) {
    int hit = -1;
    for (int i = 0; i < 3; i++)
      if (strncmp(p, mark[i], strlen(mark[i])) == 0)
        hit = i;
    if (hit >= 0 || !*p) {
      if (cur >= 0) {
        size_t n = (size_t)(p - start);
        if (n > 0 && start[n - 1] == '\n')
          n--;                 /* the newline meta_format added */
        free(*dst[cur]);
        if (!(*dst[cur] = strndup(start, n)))
          return -1;
      } else if (p != nl + 1) {
        return -1;             /* text before the first section */
      }
      if (!*p)
        return 0;
      cur = hit;
      p += strlen(mark[hit]);
      start = p;
      continue;
    }
    char *e = strchr(p, '\n');
    p = e ? e + 1 : p + strlen(p);
  }
}

typedef enum { M_OK, M_ABSENT, M_BAD, M_NOTREG, M_UNSAFE } meta_status;

/* Read and parse the .meta at path; *st gets the file it judged. */
static meta_status meta_load(const char *path, store_meta *m, struct stat *st)
{
  memset(m, 0, sizeof *m);
  int fd = open_reg(path, st);
  if (fd == NOT_REG)
    return M_NOTREG;
  if (fd < 0)
    return errno == ENOENT ? M_ABSENT : M_BAD;
  meta_status rc = M_BAD;
  char *buf = NULL;
  if (!safe(st)) {
    rc = M_UNSAFE;
    goto out;
  }
  if ((uint64_t)st->st_size > META_MAX ||
      !(buf = read_all(fd, (size_t)st->st_size)))
    goto out;
  if (strlen(buf) == (size_t)st->st_size && meta_parse(buf, m) == 0)
    rc = M_OK;
  else
    store_meta_free(m);
out:
  free(buf);
  close(fd);
  return rc;
}

/* -- Checking an entry ----------------------------------------------------- */

typedef enum {
  E_OK,        /* meta and artifact verified */
  E_ABSENT,    /* no meta */
  E_BADMETA,   /* meta unreadable, malformed, for another key or not a
                  regular file: remove it */
  E_MISSING,   /* artifact gone: remove the meta */
  E_BADART,    /* artifact ours but not a regular file, or of the wrong
                  size, checksum or key marker: remove both */
  E_UNSAFE     /* not ours or writable by others: never load */
} entry_status;

/* Verify the entry for key in dir: meta parses and is for this key, the
** artifact is a private regular file of the recorded size, key-bound
** checksum and key marker. On E_OK *m is filled (caller frees); mst and
** ast are the meta and artifact files judged, art the artifact's name (""
** if the meta is bad). */
static entry_status entry_check(const char *dir, const char *key,
                                store_meta *m, struct stat *mst,
                                struct stat *ast, char art[128], char *why,
                                size_t wlen, char **keep)
{
  char path[PATH_MAX];
  art[0] = '\0';
  memset(ast, 0, sizeof *ast);
  if (fmt(path, sizeof path, "%s/%s.meta", dir, key) < 0)
    return E_ABSENT;
  switch (meta_load(path, m, mst)) {
  case M_ABSENT: return E_ABSENT;
  case M_UNSAFE:
    snprintf(why, wlen, "meta not private (owner or mode)");
    return E_UNSAFE;
  case M_NOTREG:
    snprintf(why, wlen, "meta is %s", type_name(mst->st_mode));
    return E_BADMETA;
  case M_BAD:
    snprintf(why, wlen, "meta unreadable or malformed");
    return E_BADMETA;
  case M_OK: break;
  }
  snprintf(art, 128, "%s", m->artifact);
  entry_status rc = E_BADART;
  char *bytes = NULL;
  if (strcmp(m->key, key) != 0) {
    snprintf(why, wlen, "meta is for key %s", m->key);
    rc = E_BADMETA;
    goto bad;
  }
  if (fmt(path, sizeof path, "%s/%s", dir, m->artifact) < 0) {
    snprintf(why, wlen, "path too long");
    rc = E_BADMETA;
    goto bad;
  }
  int fd = open_reg(path, ast);
  if (fd == NOT_REG) {
    snprintf(why, wlen, "artifact is %s", type_name(ast->st_mode));
    goto bad;
  }
  if (fd < 0) {
    snprintf(why, wlen, "artifact %s: %s", m->artifact, strerror(errno));
    rc = E_MISSING;
    goto bad;
  }
  char sum[STORE_KEY_LEN + 1];
  if (!safe(ast)) {
    snprintf(why, wlen, "artifact not private (owner or mode)");
    rc = E_UNSAFE;
  } else if ((uint64_t)ast->st_size != m->bytes) {
    snprintf(why, wlen, "artifact is %lld bytes, meta says %" PRIu64,
             (long long)ast->st_size, m->bytes);
  } else if (!(bytes = read_all(fd, (size_t)m->bytes))) {
    snprintf(why, wlen, "artifact unreadable");
  } else if (artifact_sum(key, bytes, (size_t)m->bytes, sum),
             strcmp(sum, m->checksum) != 0) {
    snprintf(why, wlen, "artifact checksum %s, meta says %s", sum,
             m->checksum);
  } else if (!marker_problem(bytes, (size_t)m->bytes, key, why, wlen)) {
    rc = E_OK;
    if (keep) {                /* the verified bytes, for the caller */
      *keep = bytes;
      bytes = NULL;
    }
  }
  free(bytes);
  close(fd);
  if (rc == E_OK)
    return rc;
bad:
  store_meta_free(m);
  return rc;
}

/* Remove what a failed check condemned (see entry_status); only the very
** files judged, since a concurrent put may have replaced either. 0, or -1
** when something could not be removed (errno). */
static int entry_remove(const char *dir, const char *key, entry_status rc,
                        const struct stat *mst, const struct stat *ast,
                        const char *artifact)
{
  char path[PATH_MAX];
  int ret = 0;
  if (fmt(path, sizeof path, "%s/%s.meta", dir, key) == 0 &&
      (rc == E_BADMETA || rc == E_MISSING || rc == E_BADART) &&
      remove_if_same(dir, path, mst) < 0)
    ret = -1;
  int err = errno;
  if (rc == E_BADART && artifact[0] && ast->st_ino &&
      fmt(path, sizeof path, "%s/%s", dir, artifact) == 0 &&
      remove_if_same(dir, path, ast) < 0)
    return -1;
  errno = err;
  return ret;
}

/* The artifact the current meta for key names ("" if none or bad). */
static void artifact_of(const char *dir, const char *key, char *out,
                        size_t len)
{
  char path[PATH_MAX];
  store_meta m;
  struct stat st;
  out[0] = '\0';
  if (fmt(path, sizeof path, "%s/%s.meta", dir, key) == 0 &&
      meta_load(path, &m, &st) == M_OK) {
    snprintf(out, len, "%s", m.artifact);
    store_meta_free(&m);
  }
}

/* -- Opening the store ----------------------------------------------------- */

static int open_root(const char *root, bool create, char *why, size_t wlen)
{
  char base[PATH_MAX], dir[PATH_MAX];
  char dummy[8];
  if (!why) {
    why = dummy;
    wlen = sizeof dummy;
  }
  if (!root) {
    const tensor_config *env = tensor_cfg();
    if (!env->cache) {
      snprintf(why, wlen, "disabled by TC_CACHE=0");
      return -1;
    }
    if (!env->cache_dir[0]) {
      snprintf(why, wlen, "no TC_CACHE_DIR, XDG_CACHE_HOME or HOME");
      return -1;
    }
    if (fmt(base, sizeof base, "%s", env->cache_dir) < 0) {
      snprintf(why, wlen, "cache path too long");
      return -1;
    }
    root = base;
  }
  struct stat st;
  if (fmt(dir, sizeof dir, "%s/" STORE_LAYOUT, root) < 0) {
    snprintf(why, wlen, "cache path too long");
    return -1;
  }
  if (create && mkdirs(dir) < 0) {
    snprintf(why, wlen, "%s: cannot create: %s", dir, strerror(errno));
    return -1;
  }
  if (lstat(dir, &st) < 0) {
    if (errno == ENOENT && lstat(root, &st) < 0)
      snprintf(why, wlen, "%s: no such directory", root);
    else if (errno == ENOENT)
      snprintf(why, wlen, "%s: no kernel store here (no %s)", root,
               STORE_LAYOUT);
    else
      snprintf(why, wlen, "%s: %s", dir, strerror(errno));
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) {
    snprintf(why, wlen, "%s: not a directory (%s)", dir,
             type_name(st.st_mode));
    return -1;
  }
  if (st.st_uid != geteuid()) {
    snprintf(why, wlen, "%s: owned by uid %u, not by this user", dir,
             (unsigned)st.st_uid);
    return -1;
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    snprintf(why, wlen, "%s: writable by group or others (mode %03o)", dir,
             (unsigned)(st.st_mode & 0777));
    return -1;
  }
  pthread_mutex_lock(&mu);
  snprintf(root_dir, sizeof root_dir, "%s", dir);
  sized.known = false;         /* another store, perhaps */
  pthread_mutex_unlock(&mu);
  return 0;
}

int store_open(const char *root, char *why, size_t wlen)
{
  return open_root(root, true, why, wlen);
}

int store_open_existing(const char *root, char *why, size_t wlen)
{
  return open_root(root, false, why, wlen);
}

bool store_is_open(void) { return root_dir[0] != '\0'; }

const char *store_root(void) { return root_dir[0] ? root_dir : NULL; }

void store_close(void)
{
  pthread_mutex_lock(&mu);
  root_dir[0] = '\0';
  pthread_mutex_unlock(&mu);
}

/* -- Kernels --------------------------------------------------------------- */

int store_tmp_path(const char *key, char *path, size_t len)
{
  char dir[PATH_MAX];
  pthread_mutex_lock(&mu);
  int fd = key_dir_make(key, dir, sizeof dir) < 0
             ? -1 : tmp_open(dir, path, len);
  pthread_mutex_unlock(&mu);
  if (fd < 0)
    return -1;
  close(fd);                   /* the name is reserved; the backend writes */
  return 0;
}

/* Record a hit: rewrite the meta, unless another process replaced it since
** we read it (then theirs is newer and wins). Failure is harmless. */
static void record_hit(const char *dir, store_meta *m, const struct stat *mst)
{
  char path[PATH_MAX], tmp[PATH_MAX];
  m->hits++;
  m->last_used = (int64_t)time(NULL);
  size_t n;
  char *text = meta_format(m, &n);
  int fd = text ? tmp_open(dir, tmp, sizeof tmp) : -1;
  if (fd < 0) {
    free(text);
    return;
  }
  struct stat now;
  bool ok = write_all(fd, text, n) == 0;
  ok = close(fd) == 0 && ok;
  if (!ok || fmt(path, sizeof path, "%s/%s.meta", dir, m->key) < 0 ||
      lstat(path, &now) < 0 || !same_file(&now, mst) ||
      rename(tmp, path) < 0)
    unlink(tmp);
  free(text);
}

/* store_get, and with keep the verified artifact's bytes too. */
static int get_entry(const char *key, store_meta *m, char *so_path,
                     size_t len, char **keep)
{
  char dir[PATH_MAX], why[256], art[128];
  struct stat st, mst, ast;
  int ret = -1;
  pthread_mutex_lock(&mu);
  if (key_dir(key, dir, sizeof dir) < 0 || lstat(dir, &st) < 0)
    goto out;
  if (!S_ISDIR(st.st_mode) || !safe(&st)) {
    logc("kernel %.12s: %s is not a private directory; not loaded", key, dir);
    goto out;
  }
  /* A put may replace the entry while we check it: a failure on a meta
  ** that has since been replaced is retried on the new one. */
  for (int attempt = 0; attempt < 3; attempt++) {
    entry_status rc = entry_check(dir, key, m, &mst, &ast, art, why,
                                  sizeof why, keep);
    if (rc == E_ABSENT)
      goto out;
    if (rc == E_OK) {
      if (fmt(so_path, len, "%s/%s", dir, m->artifact) < 0) {
        store_meta_free(m);
        if (keep) {
          free(*keep);
          *keep = NULL;
        }
        goto out;
      }
      record_hit(dir, m, &mst);
      ret = 0;
      goto out;
    }
    if (rc == E_UNSAFE) {
      logc("kernel %.12s: %s; not loaded", key, why);
      goto out;
    }
    char path[PATH_MAX];
    if (fmt(path, sizeof path, "%s/%s.meta", dir, key) == 0 &&
        lstat(path, &st) == 0 && !same_file(&st, &mst))
      continue;                /* replaced meanwhile: judge the new one */
    logc("kernel %.12s: bad entry removed (%s)", key, why);
    entry_remove(dir, key, rc, &mst, &ast, art);
    goto out;
  }
out:
  pthread_mutex_unlock(&mu);
  return ret;
}

int store_get(const char *key, store_meta *m, char *so_path, size_t len)
{
  if (!m || !so_path)
    return -1;
  memset(m, 0, sizeof *m);
  return get_entry(key, m, so_path, len, NULL);
}

int store_get_bytes(const char *key, store_meta *m, void **bytes,
                    size_t *n)
{
  char path[PATH_MAX];
  char *keep = NULL;
  if (!m || !bytes || !n)
    return -1;
  memset(m, 0, sizeof *m);
  *bytes = NULL;
  if (get_entry(key, m, path, sizeof path, &keep) < 0)
    return -1;
  *bytes = keep;
  *n = (size_t)m->bytes;
  return 0;
}

/* Write n bytes into a fresh temp file in dir (when tmp_so is on another
** file system and rename cannot move it). */
static int copy_in(const char *bytes, size_t n, const char *dir, char *tmp,
                   size_t len)
{
  int fd = tmp_open(dir, tmp, len);
  if (fd < 0)
    return -1;
  int rc = write_all(fd, bytes, n);
  if (close(fd) < 0)
    rc = -1;
  if (rc < 0)
    unlink(tmp);
  return rc;
}

static void prune_if_due(uint64_t added, uint64_t max_bytes);

int store_put(const char *key, const char *tmp_so, const store_meta *m)
{
  char dir[PATH_MAX], art[PATH_MAX], mpath[PATH_MAX], copy[PATH_MAX] = "";
  char why[128];
  if (!tmp_so || !m)
    return -1;
  store_meta e = *m;           /* shallow: the texts stay the caller's */
  struct stat st;
  int ret = -1, fd = -1;
  char *text = NULL, *bytes = NULL;
  size_t n;
  pthread_mutex_lock(&mu);
  if (key_dir_make(key, dir, sizeof dir) < 0)
    goto out;
  /* The artifact: a private regular file, bound to this key, then named
  ** by its checksum. */
  fd = open_reg(tmp_so, &st);
  if (fd < 0 || (uint64_t)st.st_size > STORE_ARTIFACT_MAX ||
      fchmod(fd, 0600) < 0 || !(bytes = read_all(fd, (size_t)st.st_size)))
    goto out;
  e.bytes = (uint64_t)st.st_size;
  if (marker_problem(bytes, (size_t)e.bytes, key, why, sizeof why)) {
    logc("kernel %.12s: %s; not stored", key, why);
    goto out;
  }
  artifact_sum(key, bytes, (size_t)e.bytes, e.checksum);
  memcpy(e.key, key, STORE_KEY_LEN + 1);
  snprintf(e.artifact, sizeof e.artifact, "%s-%s%s", key, e.checksum,
           artifact_ext(e.backend));
  if (fmt(art, sizeof art, "%s/%s", dir, e.artifact) < 0 ||
      fmt(mpath, sizeof mpath, "%s/%s.meta", dir, key) < 0)
    goto out;
  if (rename(tmp_so, art) < 0) {
    if (errno != EXDEV || copy_in(bytes, (size_t)e.bytes, dir, copy,
                                  sizeof copy) < 0)
      goto out;
    if (rename(copy, art) < 0) {
      unlink(copy);
      goto out;
    }
    unlink(tmp_so);
  }
  /* The entry: its meta, also renamed into place. Same-key puts all land
  ** here; the last rename wins and every one of them names a whole file. */
  if (!e.codegen[0])
    snprintf(e.codegen, sizeof e.codegen, "%s", STORE_CODEGEN_VERSION);
  e.created = e.last_used = (int64_t)time(NULL);
  e.hits = 0;
  if (e.instrs < 0 || e.instrs > INSTRS_MAX)
    e.instrs = 0;
  if (!isfinite(e.compile_ms) || e.compile_ms < 0 || e.compile_ms > 1e9)
    e.compile_ms = 0;
  if (!(text = meta_format(&e, &n)) ||
      write_atomic(dir, mpath, text, n) < 0) {
    /* Leave the artifact only if a meta (another process's) names it. */
    char cur[128];
    artifact_of(dir, key, cur, sizeof cur);
    if (strcmp(cur, e.artifact) != 0)
      unlink(art);
    goto out;
  }
  ret = 0;
  prune_if_due(n + e.bytes, tensor_cfg()->cache_max_mb << 20);
out:
  if (ret < 0)
    unlink(tmp_so);            /* consumed either way: no temp left behind */
  if (fd >= 0)
    close(fd);
  free(bytes);
  free(text);
  pthread_mutex_unlock(&mu);
  return ret;
}

/* -- Walking the store ----------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The sorted names in dir (not . or ..), when dir is a private directory
** (opened without following a link); NULL with *n = -1 otherwise. */
static char **list_dir(const char *dir, int *n)
{
  char **v = NULL;
  int cap = 0;
  struct stat st;
  *n = -1;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK |
                O_CLOEXEC);
  if (fd < 0)
    return NULL;
  DIR *d = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) && safe(&st)
             ? fdopendir(fd) : NULL;
  if (!d) {
    close(fd);
    return NULL;
  }
  *n = 0;
  for (struct dirent *de; (de = readdir(d));) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    if (tensor_grow((void **)&v, &cap, *n + 1, sizeof *v) < 0)
      break;
    if (!(v[*n] = strdup(de->d_name)))
      break;
    (*n)++;
  }
  closedir(d);
  if (v)
    qsort(v, (size_t)*n, sizeof *v, cmp_str);
  return v;
}

static void free_list(char **v, int n)
{
  for (int i = 0; i < n; i++)
    free(v[i]);
  free(v);
}

/* The key of "<key>.meta", or NULL. */
static const char *meta_key(const char *name, char key[STORE_KEY_LEN + 1])
{
  if (strlen(name) != STORE_KEY_LEN + 5 ||
      strcmp(name + STORE_KEY_LEN, ".meta") != 0)
    return NULL;
  memcpy(key, name, STORE_KEY_LEN);
  key[STORE_KEY_LEN] = '\0';
  return is_hex(key, STORE_KEY_LEN) ? key : NULL;
}

static bool is_artifact(const char *name)
{
  size_t n = strlen(name);
  return (n == 2 * STORE_KEY_LEN + 4 && strcmp(name + n - 3, ".so") == 0) ||
         (n == 2 * STORE_KEY_LEN + 7 && strcmp(name + n - 6, ".cubin") == 0);
}

static bool is_temp(const char *name)
{
  return strncmp(name, ".tmp-", 5) == 0;
}

/* Call fn(ctx, "<root>/<kk>", names, n, st) for every two-hex-digit name
** under the root: with its sorted names (n >= 0) when it is a private
** directory; with names NULL and n = -1 when it is anything else (a link,
** a file, a directory not ours or open to others: *st says which), which
** only verify and clear look at. Stops when fn returns nonzero. */
typedef int (*dir_fn)(void *ctx, const char *dir, char **names, int n,
                      const struct stat *st);
static int each_dir(dir_fn fn, void *ctx)
{
  int nd, rc = 0;
  if (!root_dir[0])
    return -1;
  char **sub = list_dir(root_dir, &nd);
  if (nd < 0)
    return -1;
  for (int i = 0; i < nd && rc == 0; i++) {
    char dir[PATH_MAX];
    struct stat st;
    int n = -1;
    if (strlen(sub[i]) != 2 || !is_hex(sub[i], 2) ||
        fmt(dir, sizeof dir, "%s/%s", root_dir, sub[i]) < 0 ||
        lstat(dir, &st) < 0)
      continue;
    char **names = S_ISDIR(st.st_mode) && safe(&st) ? list_dir(dir, &n)
                                                    : NULL;
    rc = fn(ctx, dir, names, n, &st);
    free_list(names, n);
  }
  free_list(sub, nd);
  return rc < 0 ? -1 : 0;
}

typedef struct {
  store_visit_fn fn;
  void *ctx;
  int visited;
  bool stop;
} each_ctx;

static int each_one(void *ctx, const char *dir, char **names, int n,
                    const struct stat *dst)
{
  each_ctx *c = ctx;
  char key[STORE_KEY_LEN + 1], path[PATH_MAX];
  (void)dst;
  for (int i = 0; i < n && !c->stop; i++) {
    if (!meta_key(names[i], key) ||
        fmt(path, sizeof path, "%s/%s", dir, names[i]) < 0)
      continue;
    store_meta m;
    struct stat st;
    bool ok = meta_load(path, &m, &st) == M_OK;
    c->visited++;
    c->stop = c->fn(c->ctx, path, ok ? &m : NULL) != 0;
    if (ok)
      store_meta_free(&m);
  }
  return c->stop ? 1 : 0;
}

int store_each(store_visit_fn fn, void *ctx)
{
  each_ctx c = { fn, ctx, 0, false };
  pthread_mutex_lock(&mu);
  int rc = each_dir(each_one, &c);
  pthread_mutex_unlock(&mu);
  return rc < 0 ? -1 : c.visited;
}

/* -- Maintenance ----------------------------------------------------------- */

/* A leftover temp or an artifact no meta names: removable once it is old
** enough not to be a put in flight (the artifact lands before its meta). */
static bool stale(const struct stat *st)
{
  return st->st_mtime + GRACE_S < time(NULL);
}

typedef struct {
  FILE *report;
  int problems, failed;
} verify_ctx;

/* Report a problem with path and remove it (rc: the removal's result). */
static void verify_removed(verify_ctx *c, const char *path, const char *why,
                           int rc)
{
  c->problems++;
  if (rc == 0) {
    say(c->report, "%s: %s: removed\n", path, why);
  } else {
    c->failed++;
    say(c->report, "%s: %s: could not remove: %s\n", path, why,
        strerror(errno));
  }
}

static int verify_dir(void *ctx, const char *dir, char **names, int n,
                      const struct stat *dst)
{
  verify_ctx *c = ctx;
  char key[STORE_KEY_LEN + 1], why[256], art[128], path[PATH_MAX];
  struct stat st, ast;
  if (n < 0) {
    if (S_ISDIR(dst->st_mode)) {
      say(c->report, "%s: %s\n", dir, safe(dst)
          ? "cannot be read (left alone)"
          : "not a private directory (left alone)");
      c->problems++;
      c->failed++;
    } else {                   /* a link or a file where a directory goes */
      snprintf(why, sizeof why, "%s, not a directory",
               type_name(dst->st_mode));
      verify_removed(c, dir, why, remove_name(dir));
    }
    return 0;
  }
  bool *used = calloc((size_t)n + 1, sizeof *used);
  if (!used)
    return -1;
  for (int i = 0; i < n; i++) {
    if (!meta_key(names[i], key) ||
        fmt(path, sizeof path, "%s/%s", dir, names[i]) < 0)
      continue;
    store_meta m;
    entry_status rc = entry_check(dir, key, &m, &st, &ast, art, why,
                                  sizeof why, NULL);
    if (rc == E_ABSENT)
      continue;
    if (rc == E_OK) {
      store_meta_free(&m);
      for (int j = 0; j < n; j++)
        used[j] |= strcmp(names[j], art) == 0;
      continue;
    }
    int r;
    if (rc == E_UNSAFE) {      /* verify is explicit: unsafe goes too */
      char apath[PATH_MAX];
      r = remove_name(path);
      int err = errno;
      if (art[0] && fmt(apath, sizeof apath, "%s/%s", dir, art) == 0 &&
          remove_name(apath) < 0)
        r = -1;                /* and its artifact, whoever owns it */
      else
        errno = err;
    } else {
      r = entry_remove(dir, key, rc, &st, &ast, art);
    }
    verify_removed(c, path, why, r);
  }
  for (int i = 0; i < n; i++) {
    bool tmp = is_temp(names[i]);
    if (used[i] || !(tmp || is_artifact(names[i])) ||
        fmt(path, sizeof path, "%s/%s", dir, names[i]) < 0 ||
        lstat(path, &st) < 0)
      continue;
    if (!S_ISREG(st.st_mode)) {   /* never a put in flight: goes now */
      snprintf(why, sizeof why, "%s", type_name(st.st_mode));
      verify_removed(c, path, why, remove_name(path));
      continue;
    }
    if (!stale(&st))
      continue;
    /* A meta may have appeared for it since the scan began: re-check. */
    if (!tmp) {
      memcpy(key, names[i], STORE_KEY_LEN);
      key[STORE_KEY_LEN] = '\0';
      artifact_of(dir, key, art, sizeof art);
      if (strcmp(art, names[i]) == 0)
        continue;
    }
    verify_removed(c, path, tmp ? "stale temporary" : "orphaned artifact",
                   unlink(path) < 0 && errno != ENOENT ? -1 : 0);
  }
  free(used);
  return 0;
}

int store_verify(FILE *report, int *failed)
{
  verify_ctx c = { report, 0, 0 };
  pthread_mutex_lock(&mu);
  int rc = each_dir(verify_dir, &c);
  pthread_mutex_unlock(&mu);
  if (failed)
    *failed = c.failed;
  return rc < 0 ? -1 : c.problems;
}

/* -- Size and eviction ----------------------------------------------------- */

typedef struct {
  char dir[PATH_MAX - 64];
  char key[STORE_KEY_LEN + 1];
  char artifact[128];
  uint64_t bytes;              /* meta + artifact */
  int64_t last_used, created, mtime;
} lru_item;

typedef struct {
  lru_item *v;
  int n, cap;
  uint64_t total;              /* every byte, evictable or not */
  bool reap;                   /* remove stale temps and orphans */
  bool collect;                /* gather entries for eviction */
} lru_ctx;

static uint64_t size_of(const char *dir, const char *name)
{
  char path[PATH_MAX];
  struct stat st;
  if (fmt(path, sizeof path, "%s/%s", dir, name) < 0 ||
      lstat(path, &st) < 0 || !S_ISREG(st.st_mode))
    return 0;
  return (uint64_t)st.st_size;
}

/* Count every regular file in dir; with collect, list each good entry
** (its meta and artifact bytes) for eviction; with reap, first remove the
** stale temporaries and orphaned artifacts, which count for nothing. */
static int lru_collect(void *ctx, const char *dir, char **names, int n,
                       const struct stat *dst)
{
  lru_ctx *c = ctx;
  char key[STORE_KEY_LEN + 1], path[PATH_MAX];
  (void)dst;
  if (n < 0)
    return 0;
  bool *used = calloc((size_t)n + 1, sizeof *used);
  if (!used)
    return -1;
  for (int i = 0; i < n; i++) {
    store_meta m;
    struct stat st;
    if (!meta_key(names[i], key) ||
        fmt(path, sizeof path, "%s/%s", dir, names[i]) < 0 ||
        meta_load(path, &m, &st) != M_OK)
      continue;
    char *const *hit = bsearch(&(const char *){ m.artifact }, names,
                               (size_t)n, sizeof *names, cmp_str);
    uint64_t abytes = 0;
    if (hit) {
      used[hit - names] = true;
      abytes = size_of(dir, *hit);
    }
    used[i] = true;
    uint64_t bytes = (uint64_t)st.st_size + abytes;
    c->total += bytes;
    if (c->collect) {
      if (tensor_grow((void **)&c->v, &c->cap, c->n + 1, sizeof *c->v) < 0) {
        store_meta_free(&m);
        free(used);
        return -1;
      }
      lru_item *it = &c->v[c->n];
      if (snprintf(it->dir, sizeof it->dir, "%s", dir) < (int)sizeof it->dir) {
        c->n++;                /* (a path too long to evict by is skipped) */
        memcpy(it->key, key, sizeof key);
        snprintf(it->artifact, sizeof it->artifact, "%s", m.artifact);
        it->bytes = bytes;
        it->last_used = m.last_used;
        it->created = m.created;
        it->mtime = mtime_ns(&st);  /* sub-second order: hits rewrite it */
      }
    }
    store_meta_free(&m);
  }
  for (int i = 0; i < n; i++) {
    struct stat st;
    if (used[i] || fmt(path, sizeof path, "%s/%s", dir, names[i]) < 0 ||
        lstat(path, &st) < 0 || !S_ISREG(st.st_mode))
      continue;
    if (c->reap && stale(&st) &&
        (is_temp(names[i]) || is_artifact(names[i]))) {
      char art[128] = "";
      if (is_artifact(names[i])) {    /* named by a meta since the scan? */
        memcpy(key, names[i], STORE_KEY_LEN);
        key[STORE_KEY_LEN] = '\0';
        artifact_of(dir, key, art, sizeof art);
      }
      if (strcmp(art, names[i]) != 0 && unlink(path) == 0)
        continue;              /* a crashed writer's leftovers: gone */
    }
    c->total += (uint64_t)st.st_size;   /* temps in flight, bad metas... */
  }
  free(used);
  return 0;
}

int64_t store_size(void)
{
  lru_ctx c = { 0 };
  pthread_mutex_lock(&mu);
  int rc = each_dir(lru_collect, &c);
  pthread_mutex_unlock(&mu);
  return rc < 0 ? -1 : (int64_t)c.total;
}

/* Oldest first: last_used, then within its second the meta's mtime (every
** put and hit rewrites the meta, so that is when it was last used), then
** created. */
static int cmp_lru(const void *a, const void *b)
{
  const lru_item *x = a, *y = b;
  if (x->last_used != y->last_used)
    return x->last_used < y->last_used ? -1 : 1;
  if (x->mtime != y->mtime)
    return x->mtime < y->mtime ? -1 : 1;
  if (x->created != y->created)
    return x->created < y->created ? -1 : 1;
  return strcmp(x->key, y->key);
}


static void prune_if_due(uint64_t added, uint64_t max_bytes)
{
  pthread_mutex_lock(&mu);
  sized.bytes += added;
  sized.since += added;
  bool due = !sized.known || sized.bytes > max_bytes ||
             sized.since > max_bytes / 16;
  if (due)
    store_prune(max_bytes);
  pthread_mutex_unlock(&mu);
}

int64_t store_prune(uint64_t max_bytes)
{
  lru_ctx c = { .reap = true, .collect = true };
  int64_t freed = 0;
  char path[PATH_MAX];
  pthread_mutex_lock(&mu);
  if (each_dir(lru_collect, &c) < 0) {
    freed = -1;
    goto out;
  }
  qsort(c.v, (size_t)c.n, sizeof *c.v, cmp_lru);
  /* Meta first: from then on no reader can pick the artifact. */
  for (int i = 0; i < c.n && c.total > max_bytes; i++) {
    lru_item *it = &c.v[i];
    if (fmt(path, sizeof path, "%s/%s.meta", it->dir, it->key) < 0 ||
        unlink(path) < 0)
      continue;
    if (fmt(path, sizeof path, "%s/%s", it->dir, it->artifact) == 0)
      unlink(path);
    c.total -= it->bytes;
    freed += (int64_t)it->bytes;
  }
  if (freed > 0)
    logc("pruned %" PRId64 " bytes; %" PRIu64 " left (cap %" PRIu64 ")",
         freed, c.total, max_bytes);
  sized.known = true;
  sized.bytes = c.total;
  sized.since = 0;
out:
  free(c.v);
  pthread_mutex_unlock(&mu);
  return freed;
}

/* -- Clearing and totals --------------------------------------------------- */

typedef struct {
  FILE *report;
  int removed, failed;
} clear_ctx;

static int clear_dir(void *ctx, const char *dir, char **names, int n,
                     const struct stat *dst)
{
  clear_ctx *c = ctx;
  char key[STORE_KEY_LEN + 1], path[PATH_MAX];
  if (n < 0) {
    if (!S_ISDIR(dst->st_mode) && remove_name(dir) == 0)
      return 0;                /* a stray link or file: gone */
    c->failed++;
    say(c->report, "%s: %s\n", dir, !S_ISDIR(dst->st_mode) ? strerror(errno)
        : safe(dst) ? "cannot be read (left alone)"
                    : "not a private directory (left alone)");
    return 0;
  }
  for (int i = 0; i < n; i++) {
    bool meta = meta_key(names[i], key) != NULL;
    if (!(meta || is_artifact(names[i]) || is_temp(names[i])) ||
        fmt(path, sizeof path, "%s/%s", dir, names[i]) < 0)
      continue;
    if (remove_name(path) < 0) {
      c->failed++;
      say(c->report, "%s: cannot remove: %s\n", path, strerror(errno));
    } else if (meta) {
      c->removed++;
    }
  }
  rmdir(dir);                  /* fails harmlessly when something remains */
  return 0;
}

int store_clear(FILE *report, int *failed)
{
  clear_ctx c = { report, 0, 0 };
  pthread_mutex_lock(&mu);
  sized.known = false;
  int rc = each_dir(clear_dir, &c);
  pthread_mutex_unlock(&mu);
  if (failed)
    *failed = c.failed;
  return rc < 0 ? -1 : c.removed;
}

static int add_totals(void *ctx, const char *path, const store_meta *m)
{
  uint64_t *t = ctx;
  (void)path;
  if (m) {
    t[0]++;
    t[1] += m->bytes;
    t[2] += m->hits;
  }
  return 0;
}

void store_totals(uint64_t *entries, uint64_t *bytes, uint64_t *hits)
{
  uint64_t t[3] = { 0, 0, 0 };
  store_each(add_totals, t);
  if (entries)
    *entries = t[0];
  if (bytes)
    *bytes = t[1];
  if (hits)
    *hits = t[2];
}
