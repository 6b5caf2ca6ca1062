/*
** launch.c -- how a rendered kernel is launched: grid and block for each
** kernel shape, and the two phases of a split reduction (jit_cuda.h). No
** result depends on these choices (render.c); they only decide how much of
** the device a kernel uses.
*/
#include "jit_cuda.h"

static int64_t chunks_of(const kir_kernel *k)
{
  return tensor_red_chunks(k->row_len);
}

static unsigned clamp_grid(int64_t want, int64_t cap)
{
  if (cap < 1)
    cap = 1;
  return (unsigned)(want < 1 ? 1 : want < cap ? want : cap);
}

size_t jcuda_split_scratch(const kir_kernel *k, int64_t rows)
{
  return (size_t)(rows > 0 ? rows : 1) * (size_t)chunks_of(k) * 8;
}

void jcuda_launch_config(const kir_kernel *k, int sm_count,
                         jcuda_launch_cfg *lc)
{
  int64_t units = kir_units(k), sm = sm_count > 0 ? sm_count : 1;
  *lc = (jcuda_launch_cfg){ 0 };
  if (jcuda_scan_parallel(k) && k->row_len > TENSOR_SCAN_SEG &&
      units <= JCUDA_SCAN_BLOCK_ROWS) {   /* a block per row */
    int64_t nseg = (k->row_len + TENSOR_SCAN_SEG - 1) / TENSOR_SCAN_SEG;
    unsigned b = 32;
    while (b < JCUDA_LAUNCH_THREADS && (int64_t)b < nseg)
      b *= 2;
    lc->block = b;
    lc->grid = clamp_grid(units, sm * 4);
    return;
  }
  if (k->kind == KIR_MAP || kir_sequential(k)) {   /* a thread per unit */
    int per = k->kind == KIR_MAP ? jcuda_map_points_per_thread(k) : 1;
    int64_t threads = (units + per - 1) / per;
    lc->block = JCUDA_LAUNCH_THREADS;
    lc->grid = clamp_grid((threads + JCUDA_LAUNCH_THREADS - 1) /
                          JCUDA_LAUNCH_THREADS, sm * 4);
    return;
  }
  int64_t nch = chunks_of(k);
  if (jcuda_splittable(k) && nch >= 2 && units < 2 * sm) {
    unsigned b = JCUDA_LAUNCH_THREADS;
    int64_t rounds = units * ((nch + b / 16 - 1) / (b / 16));
    while (b > 32 && rounds < 2 * sm) {
      b /= 2;
      rounds = units * ((nch + b / 16 - 1) / (b / 16));
    }
    unsigned b2 = 32;
    while (b2 < JCUDA_LAUNCH_THREADS && (int64_t)b2 < nch)
      b2 *= 2;
    lc->split = true;
    lc->block = b;
    lc->grid = clamp_grid(rounds, sm * 8);
    lc->block2 = b2;
    lc->grid2 = clamp_grid(units, sm * 4);
    lc->scratch = jcuda_split_scratch(k, units);
    return;
  }
  unsigned b = 16;
  while (b < JCUDA_LAUNCH_THREADS && (int64_t)b < k->row_len)
    b *= 2;
  lc->block = b;
  lc->grid = clamp_grid(units, sm * 4);
}

int jcuda_launch_kernel(jcuda_function fn, const kir_kernel *k,
                        void *params)
{
  jcuda_launch_cfg lc;
  jcuda_launch_config(k, jcuda_sm_count(), &lc);
  if (!lc.split)
    return jcuda_launch(fn, lc.grid, lc.block, params);
  jcuda_ptr scratch = 0;
  if (jcuda_alloc(&scratch, lc.scratch) < 0)
    return -1;
  jcuda_params_split(k, params, scratch, 1);
  int rc = jcuda_launch(fn, lc.grid, lc.block, params);
  if (rc == 0) {
    jcuda_params_split(k, params, scratch, 2);
    rc = jcuda_launch(fn, lc.grid2, lc.block2, params);
  }
  jcuda_params_split(k, params, 0, 0);
  jcuda_free(scratch, lc.scratch);
  return rc;
}
