/*
** jcpu_impl.h -- private to src/jit_cpu: the small builder that emit.c and
** approx_jit.c share to write libgccjit code as straight-line statements
** into a "current block" (selects split it), plus the codegen entry point.
** Nothing outside this folder includes it (libgccjit stays an internal
** dependency of the module, loaded at run time: gccjit_api.h).
*/
#ifndef TC_JCPU_IMPL_H
#define TC_JCPU_IMPL_H

#include "gccjit_api.h"

#include "jit_cpu.h"

/* The types every kernel uses, fetched once per context. */
typedef struct {
  gcc_jit_type *v, *b, *i, *u8, *u16, *i32, *u32, *i64, *u64, *f32, *f64;
  gcc_jit_type *cp, *cpp, *dp, *i64p, *vp;   /* char*, char**, double*,
                                                int64_t*, void* */
} jb_types;

/* A position in the function under construction. Every value that code
** names (approx.h's variables, each kernel instruction) becomes a local,
** so dumps read like the C they mirror and no expression tree is shared. */
typedef struct jb {
  gcc_jit_context *ctx;
  gcc_jit_function *fn;
  gcc_jit_block *b;          /* current block; NULL after a return */
  jb_types *t;
  int nloc, nblk;            /* counters for unique local/block names */
  /* transcendental functions, built on first use in this context
  ** (ALWAYS_INLINE), indexed by kir opcode and [f32, f64] */
  gcc_jit_function **approx;
} jb;

/* -- Builder helpers (builder.c) ----------------------------------------------- */

/* A new local named after hint, assigned v in the current block. */
gcc_jit_rvalue *jb_let(jb *j, const char *hint, gcc_jit_type *t,
                       gcc_jit_rvalue *v);
gcc_jit_lvalue *jb_local(jb *j, gcc_jit_type *t, const char *hint);
gcc_jit_block *jb_block(jb *j, const char *hint);
void jb_assign(jb *j, gcc_jit_lvalue *lv, gcc_jit_rvalue *v);
/* c ? x : y, with x and y already evaluated: t = y; if (c) t = x. GCC turns
** the resulting PHI back into a branch-free select (needs
** -fno-trapping-math to if-convert inside vectorized loops). */
gcc_jit_rvalue *jb_sel(jb *j, gcc_jit_type *t, gcc_jit_rvalue *c,
                       gcc_jit_rvalue *x, gcc_jit_rvalue *y);
gcc_jit_rvalue *jb_bin(jb *j, enum gcc_jit_binary_op op, gcc_jit_rvalue *a,
                       gcc_jit_rvalue *b);
gcc_jit_rvalue *jb_cmp(jb *j, enum gcc_jit_comparison op, gcc_jit_rvalue *a,
                       gcc_jit_rvalue *b);
gcc_jit_rvalue *jb_cast(jb *j, gcc_jit_rvalue *v, gcc_jit_type *t);
gcc_jit_rvalue *jb_bitcast(jb *j, gcc_jit_rvalue *v, gcc_jit_type *t);
gcc_jit_rvalue *jb_fconst(jb *j, gcc_jit_type *t, double v);
gcc_jit_rvalue *jb_iconst(jb *j, gcc_jit_type *t, int64_t v);
gcc_jit_rvalue *jb_uconst(jb *j, gcc_jit_type *t, uint64_t v);
void jcpu_types_init(gcc_jit_context *ctx, jb_types *t);

/* -- Transcendentals (approx_jit.c) ----------------------------------------- */

/* The call op(x[, y]) for a float type (t is f32 or f64), building the
** always-inline function on first use. op is KOP_EXP .. KOP_POW. */
gcc_jit_rvalue *jcpu_approx_call(jb *j, int op, gcc_jit_type *t,
                                 gcc_jit_rvalue *x, gcc_jit_rvalue *y);

/* -- Checks (check.c) ---------------------------------------------------------- */

/* Is k something this backend can compile? 0, or -1 with a reason. */
int jcpu_check(const kir_kernel *k, char *reason, size_t rlen);
/* Mark every instruction value v reaches (itself included). */
void jcpu_closure(const kir_kernel *k, int v, uint8_t *mark);

static inline bool jcpu_is_half(int dt) { return dt == TC_F16 || dt == TC_BF16; }
/* A value of a storage dtype is an f32 in registers (rounded to it). */
static inline bool jcpu_is_float(int dt)
{
  return dt == TC_F32 || dt == TC_F64 || jcpu_is_half(dt);
}

/* Which entries a kernel has. Static kernels follow kir_split(). A dynamic
** ROWS kernel learns its row count only at launch, so it gets both the row
** mode "main" (unless it has no outer dims) and the split-mode passes, and
** the launcher picks by the actual row count. */
static inline void jcpu_modes(const kir_kernel *k, bool *row, bool *split)
{
  if (k->kind == KIR_MAP) {
    *row = true;
    *split = false;
  } else if (k->dynamic) {
    *row = k->ndim > 0;
    *split = true;
  } else {
    *split = kir_split(k);
    *row = !*split;
  }
}

/* -- Compiling (jit.c), shared with the compile worker (worker.c) -------- */

/* Compile k to a shared object at so_path with its key embedded (no load,
** no lock, no fault injection): the body of jcpu_compile_to_file and of
** one request in the compile worker. On success *source is libgccjit's
** C-like dump (malloc'd, may be NULL). */
jcpu_status jcpu_compile_file(const kir_kernel *k, const char *key,
                              const char *so_path, char **source,
                              char *reason, size_t rlen);
/* The lock that serializes in-process compiles (the worker takes it around
** fork, so no thread is inside libgccjit when the child is made). */
void jcpu_compile_lock(void);
void jcpu_compile_unlock(void);
/* Consume one jcpu_fail_next injection: true when this compile must fail. */
bool jcpu_take_fault(void);
void jcpu_clear_faults(void);
/* Give a loaded kernel the dump and compile time of the compile that made
** it (source: malloc'd, now owned by jk). */
void jcpu_kernel_adopt(jcpu_kernel *jk, char *source, double ms);

/* -- Codegen (emit.c) ---------------------------------------------------------- */

/* Build k's entry functions into ctx (k already checked). 0, or -1 when
** the codegen state could not be allocated. */
int jcpu_emit(gcc_jit_context *ctx, const kir_kernel *k);

#endif
