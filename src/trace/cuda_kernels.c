/*
** cuda_kernels.c -- CUDA kernels in the disk store. eager's one-op CUDA
** kernels are compiled on first use by the kernel memo in src/eager/cuda.c;
** the store is in cache, above eager in the layering, so the memo reaches it
** through the hooks this file gives it at init (eager_cuda_store_set).
**
** A CUDA kernel's key is xxh3-128 of its code's canonical text (kir_print
** with sizes and strides zeroed: the memo's kernels are shape-dynamic, so
** one cubin serves every shape), the backend "cuda", the device's arch and
** jcuda_key_text (NVRTC version, arch, renderer version, APPROX_FMA,
** options): a CPU
** and a CUDA kernel of one IR never share a key, and a cubin for another
** arch or NVRTC is never found. The artifact is the cubin followed by the
** key marker (a NUL, STORE_KEY_MARKER, the key, a NUL), since a cubin has
** no symbol of ours to carry it; the store checks its size, key-bound
** checksum and marker like any artifact's, and the loader here requires
** the marker at the end and strips it.
*/
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compile_int.h"
#include "../jit_cuda/jit_cuda.h"

#define MARKER_LEN (sizeof STORE_KEY_MARKER - 1)
#define TRAILER_LEN (1 + MARKER_LEN + STORE_KEY_LEN + 1)

/* The canonical text of k's code: what a shape-dynamic kernel's sizes and
** strides are (arguments) left out. */
static char *code_text(const kir_kernel *k)
{
  kir_kernel *c = kir_new();
  if (!c)
    return NULL;
  kir_copy(c, k);
  if (c->dynamic) {
    memset(c->size, 0, sizeof c->size);
    c->row_len = 0;
    for (int b = 0; b < c->nbufs; b++)
      memset(c->buf[b].stride, 0, sizeof c->buf[b].stride);
  }
  char *text = kir_text(c);
  kir_free(c);
  return text;
}

/* k's key for arch; returns its code text (caller frees), NULL on OOM. */
static char *cuda_key(const kir_kernel *k, const char *arch,
                      char key[STORE_KEY_LEN + 1])
{
  char *ir = code_text(k);
  char text[512];
  if (ir)
    store_key(ir, "cuda", arch, jcuda_key_text(arch, text, sizeof text), key);
  return ir;
}

static void trailer_of(const char *key, char out[TRAILER_LEN])
{
  out[0] = '\0';
  memcpy(out + 1, STORE_KEY_MARKER, MARKER_LEN);
  memcpy(out + 1 + MARKER_LEN, key, STORE_KEY_LEN);
  out[TRAILER_LEN - 1] = '\0';
}

static void *load(const kir_kernel *k, const char *arch, size_t *len)
{
  char key[STORE_KEY_LEN + 1], want[TRAILER_LEN];
  char *ir = trace_store_open() ? cuda_key(k, arch, key) : NULL;
  if (!ir)
    return NULL;
  free(ir);
  store_meta m;
  void *bytes = NULL;
  size_t n = 0;
  if (store_get_bytes(key, &m, &bytes, &n) < 0)
    return NULL;
  store_meta_free(&m);
  trailer_of(key, want);
  if (n <= TRAILER_LEN ||
      memcmp((char *)bytes + n - TRAILER_LEN, want, TRAILER_LEN) != 0) {
    tensor_log(TC_LOG_CACHE, "CUDA kernel %.12s: stored artifact does not "
               "end in its key marker; compiling", key);
    free(bytes);
    return NULL;
  }
  if (tensor_log_on(TC_LOG_CACHE))
    tensor_log(TC_LOG_CACHE, "CUDA kernel %.12s loaded from disk", key);
  *len = n - TRAILER_LEN;   /* the trailer's first byte, a NUL, follows */
  return bytes;
}

/* Write the cubin and its trailer to the reserved temporary path. */
static int write_artifact(const char *path, const void *cubin, size_t len,
                          const char *key)
{
  char trailer[TRAILER_LEN];
  trailer_of(key, trailer);
  int fd = open(path, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return -1;
  bool ok = write(fd, cubin, len) == (ssize_t)len &&
            write(fd, trailer, TRAILER_LEN) == (ssize_t)TRAILER_LEN;
  return close(fd) == 0 && ok ? 0 : -1;
}

static void enter(const kir_kernel *k, const char *arch, const void *cubin,
                  size_t len, const char *src, double ms)
{
  char key[STORE_KEY_LEN + 1], path[4096];
  char *ir = trace_store_open() ? cuda_key(k, arch, key) : NULL;
  if (!ir)
    return;
  if (store_tmp_path(key, path, sizeof path) == 0) {
    store_meta m;
    trace_meta_fill(&m, k, ir, src, NULL, ms, 0);
    snprintf(m.backend, sizeof m.backend, "cuda");
    snprintf(m.target, sizeof m.target, "%s", arch);
    snprintf(m.compiler, sizeof m.compiler, "%s", jcuda_nvrtc_version());
    if (write_artifact(path, cubin, len, key) < 0 ||
        store_put(key, path, &m) < 0) {
      unlink(path);
      tensor_log(TC_LOG_CACHE, "CUDA kernel %.12s: cannot write the disk "
                 "store (%s); it stays in memory", key, store_root());
    }
  }
  free(ir);
}

void trace_cuda_store_register(void)
{
  eager_cuda_store_set(&(eager_cuda_store){ load, enter });
}
