/*
** tc-dump -- inspect and maintain tc's on-disk kernel store (DESIGN.md
** "Artifacts"). Everything goes through store.h, so the tool reads the
** store exactly as the runtime does. Exit: 0 ok, 1 problem found, 2 usage.
*/
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/cache/store.h"
#include "../src/fuse/kir.h"
#include "../src/jit_cuda/jit_cuda.h"
#include "../src/tensor/tensor.h"

#define EXIT_PROBLEM 1
#define EXIT_USAGE 2

static const char usage_text[] =
  "usage: tc-dump list\n"
  "       tc-dump show [--cuda] KEY-PREFIX\n"
  "       tc-dump stats\n"
  "       tc-dump verify\n"
  "       tc-dump prune [--max-mb N]\n"
  "       tc-dump clear\n"
  "       tc-dump --help\n";

static const char help_text[] =
  "NAME\n"
  "    tc-dump - inspect and maintain the tc kernel cache on disk\n"
  "\n"
  "SYNOPSIS\n"
  "    tc-dump list\n"
  "    tc-dump show [--cuda] KEY-PREFIX\n"
  "    tc-dump stats\n"
  "    tc-dump verify\n"
  "    tc-dump prune [--max-mb N]\n"
  "    tc-dump clear\n"
  "    tc-dump -h | --help\n"
  "\n"
  "DESCRIPTION\n"
  "    With TC_COMPILE=1, tc compiles hot regions into fused kernels and\n"
  "    keeps each one on disk: an artifact (a shared object, or a cubin for\n"
  "    a CUDA kernel) named by its\n"
  "    checksum, and a metadata file holding the kernel IR, the generated\n"
  "    source, the guards, the compile time and the hit count. Later\n"
  "    processes load kernels from there instead of compiling them.\n"
  "    tc-dump reads and maintains that store with the same code the\n"
  "    runtime uses, so it sees exactly what a program would load.\n"
  "\n"
  "COMMANDS\n"
  "    list    One line per kernel: key, backend, kind and instruction\n"
  "            count, shape, hits, compile time, artifact bytes, then the\n"
  "            ops fused into it and the regions (structure hashes) it was\n"
  "            compiled for. Entries whose metadata cannot be read are\n"
  "            reported on stderr.\n"
  "    show KEY-PREFIX\n"
  "            Every metadata field of the one kernel whose key starts\n"
  "            with KEY-PREFIX, then its IR, generated source and guards.\n"
  "            For a CUDA kernel the source is its CUDA C, and its PTX\n"
  "            follows (NVRTC, for compute_XY of the entry's sm_XY; without\n"
  "            NVRTC, one line saying why). With --cuda, a CPU kernel's IR\n"
  "            is also rendered as CUDA C and compiled to PTX (compute_90).\n"
  "            A prefix matching no kernel, or more than one, is an error.\n"
  "    stats   Number of entries, artifact bytes, bytes on disk (metadata,\n"
  "            artifacts and temporary files: what the cap counts), total\n"
  "            hits, the root.\n"
  "    verify  Check every entry as a program would before loading it\n"
  "            (regular files, owned by you and not writable by others,\n"
  "            metadata parses and names its own key, artifact of the\n"
  "            recorded size with its key-bound checksum and key marker);\n"
  "            report and remove bad entries, anything that is not a\n"
  "            regular file (a link, FIFO or directory: never opened),\n"
  "            orphaned artifacts and stale temporary files.\n"
  "    prune [--max-mb N]\n"
  "            Evict least recently used kernels until the store's files\n"
  "            (every byte: metadata, artifacts, temporaries) take at most\n"
  "            N MiB (default: TC_CACHE_MAX_MB, else 1024).\n"
  "    clear   Remove every kernel.\n"
  "\n"
  "    No command creates a store: on a directory that holds none,\n"
  "    tc-dump says so and exits 1.\n"
  "\n"
  "ENVIRONMENT\n"
  "    TC_CACHE_DIR    the store's root (default $XDG_CACHE_HOME/tc, else\n"
  "                    ~/.cache/tc)\n"
  "    TC_CACHE        0 disables the store; tc-dump then has nothing to\n"
  "                    read and exits 1\n"
  "    TC_CACHE_MAX_MB the size cap, in MiB, used by prune by default\n"
  "\n"
  "EXIT STATUS\n"
  "    0  success\n"
  "    1  a problem was found: verify found bad entries, show matched no\n"
  "       kernel or several, an entry could not be read, something could\n"
  "       not be removed (clear, verify) or the store stays over the cap\n"
  "       (prune), or there is no usable store at the root\n"
  "    2  bad usage: unknown command, missing or extra arguments\n"
  "\n"
  "FILES\n"
  "    <root>/v2/<kk>/<key>.meta        metadata of kernel <key>\n"
  "    <root>/v2/<kk>/<key>-<sum>.so    its artifact; <sum> is the xxh3-128\n"
  "                                     checksum of <key> and its bytes\n"
  "    <root>/v2/<kk>/<key>-<sum>.cubin a CUDA kernel's artifact\n"
  "    <kk> is the key's first two hex digits; every directory is mode\n"
  "    0700 and every file 0600.\n";

static int bad_usage(const char *fmt, const char *arg)
{
  fprintf(stderr, "tc-dump: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n%s", usage_text);
  return EXIT_USAGE;
}

/* -- list ----------------------------------------------------------------- */

static int list_one(void *ctx, const char *path, const store_meta *m)
{
  int *unreadable = ctx;
  if (!m) {
    fprintf(stderr, "tc-dump: %s: unreadable metadata (see tc-dump verify)\n",
            path);
    (*unreadable)++;
    return 0;
  }
  printf("%s  %-4s %-9s %5d instrs  %-24s %8" PRIu64 " hits %9.1f ms "
         "%10" PRIu64 " bytes  ops %s  regions %s\n", m->key, m->backend,
         m->kind, m->instrs, m->shape, m->hits, m->compile_ms, m->bytes,
         m->ops[0] ? m->ops : "-", m->regions[0] ? m->regions : "-");
  return 0;
}

static int cmd_list(void)
{
  int unreadable = 0;
  if (store_each(list_one, &unreadable) < 0) {
    fprintf(stderr, "tc-dump: cannot read %s\n", store_root());
    return EXIT_PROBLEM;
  }
  return unreadable ? EXIT_PROBLEM : 0;
}

/* -- show ----------------------------------------------------------------- */

typedef struct {
  const char *prefix;
  size_t len;
  int matches;
  char key[STORE_KEY_LEN + 1];    /* the first match */
} find_ctx;

static int find_one(void *ctx, const char *path, const store_meta *m)
{
  find_ctx *f = ctx;
  (void)path;
  if (m && strncmp(m->key, f->prefix, f->len) == 0 && f->matches++ == 0)
    memcpy(f->key, m->key, sizeof f->key);
  return 0;
}

static void print_time(const char *name, int64_t t)
{
  char buf[64] = "?";
  time_t tt = (time_t)t;
  struct tm tm;
  if (localtime_r(&tt, &tm))
    strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %z", &tm);
  printf("%-11s %" PRId64 " (%s)\n", name, t, buf);
}

static void print_section(const char *name, const char *text)
{
  size_t n = text ? strlen(text) : 0;
  printf("\n--- %s ---\n%s%s", name, text ? text : "(none)",
         n && text[n - 1] == '\n' ? "" : "\n");
}

/* PTX of CUDA C src for arch "sm_XY" (as compute_XY), or why there is
** none. */
static void print_ptx(const char *src, const char *arch)
{
  char virt[32], *ptx = NULL, *log = NULL;
  size_t len = 0;
  if (strncmp(arch, "sm_", 3) != 0 || strlen(arch) > 12) {
    print_section("ptx", "(none: the entry's target is not an sm_XY arch)");
    return;
  }
  snprintf(virt, sizeof virt, "compute_%s", arch + 3);
  if (!jcuda_nvrtc_available()) {
    printf("\n--- ptx ---\n(none: %s)\n", jcuda_nvrtc_reason());
  } else if (jcuda_nvrtc_compile(src, virt, JCUDA_PTX, &ptx, &len, &log) < 0) {
    printf("\n--- ptx ---\n(none: NVRTC failed)\n%s\n", log ? log : "");
  } else {
    printf("\n--- ptx (%s, %s) ---\n", virt, jcuda_nvrtc_version());
    fwrite(ptx, 1, strnlen(ptx, len), stdout);
  }
  free(ptx);
  free(log);
}

/* A CPU kernel's IR rendered as CUDA C, and its PTX. */
static void print_cuda_of_ir(const char *ir)
{
  char why[256];
  kir_kernel *k = ir ? kir_parse(ir, why, sizeof why) : NULL;
  char *src = k ? jcuda_render(k, why, sizeof why) : NULL;
  if (!ir)
    snprintf(why, sizeof why, "the entry has no IR");
  if (!src) {
    printf("\n--- cuda ---\n(none: %s)\n", why);
  } else {
    print_section("cuda", src);
    print_ptx(src, "sm_90");
  }
  free(src);
  kir_free(k);
}

typedef struct {
  const char *key;
  bool cuda;                      /* --cuda */
} show_ctx;

static int show_one(void *ctx, const char *path, const store_meta *m)
{
  const show_ctx *sc = ctx;
  const char *key = sc->key;
  if (!m || strcmp(m->key, key) != 0)
    return 0;
  const char *slash = strrchr(path, '/');
  int dirlen = slash ? (int)(slash - path) : 0;
  printf("%-11s %s\n", "key:", m->key);
  printf("%-11s %.*s/%s\n", "artifact:", dirlen, path, m->artifact);
  printf("%-11s %s\n", "meta:", path);
  printf("%-11s %s\n", "checksum:", m->checksum);
  printf("%-11s %" PRIu64 "\n", "bytes:", m->bytes);
  printf("%-11s %s\n", "backend:", m->backend);
  printf("%-11s %s\n", "target:", m->target);
  printf("%-11s %s\n", "compiler:", m->compiler);
  printf("%-11s %s\n", "codegen:", m->codegen);
  printf("%-11s %s\n", "kind:", m->kind);
  printf("%-11s %s\n", "shape:", m->shape);
  printf("%-11s %s\n", "ops:", m->ops);
  printf("%-11s %s\n", "regions:", m->regions);
  printf("%-11s %d\n", "instrs:", m->instrs);
  printf("%-11s %.3f\n", "compile_ms:", m->compile_ms);
  print_time("created:", m->created);
  print_time("last_used:", m->last_used);
  printf("%-11s %" PRIu64 "\n", "hits:", m->hits);
  print_section("ir", m->ir);
  print_section("source", m->source);
  print_section("guards", m->guards);
  if (strcmp(m->backend, "cuda") == 0 && m->source)
    print_ptx(m->source, m->target);
  else if (sc->cuda)
    print_cuda_of_ir(m->ir);
  return 1;
}

static int cmd_show(const char *prefix, bool cuda)
{
  find_ctx f = { prefix, strlen(prefix), 0, "" };
  if (store_each(find_one, &f) < 0) {
    fprintf(stderr, "tc-dump: cannot read %s\n", store_root());
    return EXIT_PROBLEM;
  }
  if (f.matches != 1) {
    fprintf(stderr, "tc-dump: %s: %s\n", prefix,
            f.matches ? "ambiguous prefix (matches several kernels; give "
                        "more digits)"
                      : "no kernel with this key prefix");
    return EXIT_PROBLEM;
  }
  store_each(show_one, &(show_ctx){ f.key, cuda });
  return 0;
}

/* -- stats, verify, prune, clear ------------------------------------------ */

static int cmd_stats(void)
{
  uint64_t entries, bytes, hits;
  store_totals(&entries, &bytes, &hits);
  int64_t disk = store_size();
  printf("root:      %s\n", store_root());
  printf("entries:   %" PRIu64 "\n", entries);
  printf("bytes:     %" PRIu64 " (%.1f MiB)\n", bytes,
         (double)bytes / (1 << 20));
  printf("on disk:   %" PRId64 " (%.1f MiB)\n", disk,
         (double)disk / (1 << 20));
  printf("hits:      %" PRIu64 "\n", hits);
  return disk < 0 ? EXIT_PROBLEM : 0;
}

static int cmd_verify(void)
{
  uint64_t entries;
  int failed;
  int problems = store_verify(stdout, &failed);
  if (problems < 0) {
    fprintf(stderr, "tc-dump: cannot read %s\n", store_root());
    return EXIT_PROBLEM;
  }
  store_totals(&entries, NULL, NULL);
  if (failed) {
    printf("%d problem%s found, %d of them not removed; %" PRIu64
           " good entries\n", problems, problems == 1 ? "" : "s", failed,
           entries);
    fprintf(stderr, "tc-dump: %d problem%s could not be removed\n", failed,
            failed == 1 ? "" : "s");
    return EXIT_PROBLEM;
  }
  if (problems) {
    printf("%d problem%s found and removed; %" PRIu64 " good entries\n",
           problems, problems == 1 ? "" : "s", entries);
    return EXIT_PROBLEM;
  }
  printf("ok: %" PRIu64 " entries verified\n", entries);
  return 0;
}

/* A size in MiB: a whole non-negative number. */
static int parse_mb(const char *s, uint64_t *mb)
{
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (!*s || *s == '-' || *end || errno || v > (UINT64_MAX >> 20))
    return -1;
  *mb = v;
  return 0;
}

static int cmd_prune(int argc, char **argv)
{
  uint64_t mb = tensor_cfg()->cache_max_mb;
  if (argc == 2 && strncmp(argv[0], "--max-mb", 9) == 0) {
    if (parse_mb(argv[1], &mb) < 0)
      return bad_usage("--max-mb wants a whole number of MiB, not '%s'",
                       argv[1]);
  } else if (argc == 1 && strncmp(argv[0], "--max-mb=", 9) == 0) {
    if (parse_mb(argv[0] + 9, &mb) < 0)
      return bad_usage("--max-mb wants a whole number of MiB, not '%s'",
                       argv[0] + 9);
  } else if (argc != 0) {
    return bad_usage("prune: unexpected argument '%s'", argv[0]);
  }
  int64_t freed = store_prune(mb << 20);
  if (freed < 0) {
    fprintf(stderr, "tc-dump: cannot read %s\n", store_root());
    return EXIT_PROBLEM;
  }
  uint64_t entries;
  store_totals(&entries, NULL, NULL);
  int64_t disk = store_size();
  printf("freed %" PRId64 " bytes; %" PRIu64 " entries, %" PRId64
         " bytes remain (cap %" PRIu64 " MiB)\n", freed, entries, disk, mb);
  if (disk < 0 || (uint64_t)disk > (mb << 20)) {
    fprintf(stderr, "tc-dump: the store still takes %" PRId64 " bytes, over "
            "the cap of %" PRIu64 " MiB (files that could not be removed, "
            "or writes in flight)\n", disk, mb);
    return EXIT_PROBLEM;
  }
  return 0;
}

static int cmd_clear(void)
{
  int failed;
  int n = store_clear(stderr, &failed);
  if (n < 0) {
    fprintf(stderr, "tc-dump: cannot read %s\n", store_root());
    return EXIT_PROBLEM;
  }
  printf("removed %d entr%s from %s\n", n, n == 1 ? "y" : "ies",
         store_root());
  if (failed) {
    fprintf(stderr, "tc-dump: clear failed: %d file%s could not be removed\n",
            failed, failed == 1 ? "" : "s");
    return EXIT_PROBLEM;
  }
  return 0;
}

/* -- main ----------------------------------------------------------------- */

int main(int argc, char **argv)
{
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      fputs(help_text, stdout);
      return 0;
    }
  if (argc < 2)
    return bad_usage("%s", "no command given");
  const char *cmd = argv[1];
  int nargs = argc - 2;
  static const char *const plain[] = { "list", "stats", "verify", "clear" };
  bool known = strcmp(cmd, "show") == 0 || strcmp(cmd, "prune") == 0;
  for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
    if (strcmp(cmd, plain[i]) == 0) {
      known = true;
      if (nargs)
        return bad_usage("unexpected argument '%s'", argv[2]);
    }
  if (!known)
    return bad_usage("unknown command '%s'", cmd);
  bool cuda = nargs == 2 && strcmp(cmd, "show") == 0 &&
              strcmp(argv[2], "--cuda") == 0;
  if (strcmp(cmd, "show") == 0 && nargs != 1 + cuda)
    return bad_usage("%s", "show wants [--cuda] and one KEY-PREFIX");
  /* Only the compiling library creates a store: a mistyped TC_CACHE_DIR
  ** is reported, never made. */
  char why[512];
  if (store_open_existing(NULL, why, sizeof why) < 0) {
    fprintf(stderr, "tc-dump: the kernel store cannot be used: %s\n", why);
    return EXIT_PROBLEM;
  }
  int rc;
  if (strcmp(cmd, "list") == 0)
    rc = cmd_list();
  else if (strcmp(cmd, "show") == 0)
    rc = cmd_show(argv[2 + cuda], cuda);
  else if (strcmp(cmd, "stats") == 0)
    rc = cmd_stats();
  else if (strcmp(cmd, "verify") == 0)
    rc = cmd_verify();
  else if (strcmp(cmd, "prune") == 0)
    rc = cmd_prune(nargs, argv + 2);
  else
    rc = cmd_clear();
  store_close();
  if (fflush(stdout) != 0)
    rc = EXIT_PROBLEM;
  return rc;
}
