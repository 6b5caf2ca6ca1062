/*
** hostexec.h -- checking the CUDA backend without a GPU.
**
** hx_run: render a kernel as CUDA C (jcuda_render), compile that text with
** gcc and shim.h into a shared object (cached by source text), and run it
** on the host: blocks one after another, each block's threads as fibers
** that meet at every barrier. So the exact text NVRTC would compile
** computes on real buffers, and tests compare it with eager bit for bit.
**
** hx_nvrtc: compile the text with NVRTC to a cubin for sm_90: what the
** backend loads on an H100 or H200 (NVRTC assembles its PTX with the
** ptxas it carries). hx_ptxas_agrees: and the toolkit's ptxas, given
** NVRTC's PTX, makes the same machine code.
**
** Linked into a test, the constructor reads TC_TEST_CUDA (a comma list):
**   host      every compiled kernel's launch runs through hx_run
**             (trace_launch_hook) instead of the CPU backend;
**   host:N    the first N launches of each distinct kernel (the rest run
**             on the CPU backend, so a test that loops stays fast)
**   nvrtc     every distinct kernel is also compiled by NVRTC to an sm_90
**             cubin (hx_nvrtc); with nvrtc or dump, every distinct
**             kernel's text also goes through kir_parse and must come
**             back the same kernel (kir_roundtrip.h)
**   dump=DIR  write each distinct kernel's IR and CUDA C to DIR
**             (kernel-N.ir, kernel-N.cu), to read or to feed nvcc
** and at exit prints one summary line; it exits 1 if any kernel failed to
** render, compile or run, or if "host" was asked and kernels were compiled
** but none ran through it.
*/
#ifndef TC_HOSTEXEC_H
#define TC_HOSTEXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../src/fuse/kir.h"

/* Grid and block for a host launch: the results must not depend on them.
** With split, a split reduction (jcuda_splittable): phase 1 on grid x
** block, phase 2 on grid2 x block2, through a scratch buffer. */
typedef struct {
  unsigned grid, block;
  bool split;
  unsigned grid2, block2;
} hx_config;

/* Run kernel k's units [lo, hi) as its CUDA C would run on a device with
** launch configuration cfg. 0, or -1 with a reason (split asked of a
** kernel that is not splittable, too). */
int hx_run(const kir_kernel *k, char *const *bufs, const double *scalars,
           const int64_t *dims, int64_t lo, int64_t hi, hx_config cfg,
           char *why, size_t wlen);

/* Compile k's CUDA C with NVRTC to a cubin for sm_90. A text accepted
** before in this test run (TC_TEST_CUDA_CACHE) is not compiled again. 0,
** 1 when NVRTC is absent (skipped), or -1 with a reason (the full log goes
** to stderr). */
int hx_nvrtc(const kir_kernel *k, char *why, size_t wlen);

/* Does the toolkit's ptxas, given NVRTC's PTX of k (compute_90), make
** the machine code of NVRTC's sm_90 cubin (every .text section the same
** bytes)? So a cubin check is a ptxas check. 0, 1 when NVRTC or ptxas is
** absent (skipped), or -1 with a reason. */
int hx_ptxas_agrees(const kir_kernel *k, char *why, size_t wlen);

/* Do cubins a and b hold the same machine code (their .text sections, by
** name and bytes, in order)? False for anything but an ELF64 cubin. */
bool hx_same_machine_code(const char *a, size_t alen, const char *b,
                          size_t blen);

#endif
