/*
** gccjit_api.h -- libgccjit, loaded with dlopen at the first compile
** (private to src/jit_cpu). libtc then has no link-time dependency on it:
** a machine without it, or with a C library older than the one it was
** built against, runs tc eagerly and compile mode falls back with the
** reason (DESIGN.md principle 5), as CUDA's libraries do (jit_cuda.h).
** The module calls libgccjit by its own names: each gcc_jit_* function it
** uses is defined below as the pointer loaded for it (one missing from
** JCPU_GCCJIT_FUNCS is left undefined: libtc does not link).
*/
#ifndef TC_GCCJIT_API_H
#define TC_GCCJIT_API_H

#include <stddef.h>

#include <libgccjit.h>

#define JCPU_GCCJIT_FUNCS(X) \
  X(block_add_assignment) \
  X(block_add_assignment_op) \
  X(block_add_eval) \
  X(block_end_with_conditional) \
  X(block_end_with_jump) \
  X(block_end_with_return) \
  X(block_end_with_void_return) \
  X(context_acquire) \
  X(context_add_command_line_option) \
  X(context_compile) \
  X(context_compile_to_file) \
  X(context_dump_to_file) \
  X(context_get_builtin_function) \
  X(context_get_first_error) \
  X(context_get_type) \
  X(context_new_array_access) \
  X(context_new_array_type) \
  X(context_new_binary_op) \
  X(context_new_bitcast) \
  X(context_new_call) \
  X(context_new_cast) \
  X(context_new_comparison) \
  X(context_new_function) \
  X(context_new_global) \
  X(context_new_location) \
  X(context_new_param) \
  X(context_new_rvalue_from_double) \
  X(context_new_rvalue_from_long) \
  X(context_new_unary_op) \
  X(context_release) \
  X(context_set_bool_option) \
  X(context_set_bool_print_errors_to_stderr) \
  X(context_set_int_option) \
  X(function_new_block) \
  X(function_new_local) \
  X(global_set_initializer) \
  X(lvalue_as_rvalue) \
  X(lvalue_get_address) \
  X(param_as_rvalue) \
  X(result_get_code) \
  X(result_release) \
  X(rvalue_get_type) \
  X(type_get_const) \
  X(type_get_pointer) \
  X(version_major) \
  X(version_minor) \
  X(version_patchlevel)

/* Newer than the oldest libgccjit tc runs on: NULL where the library
** lacks them, and their callers do without (context_add_driver_option,
** libgccjit ABI 11, GCC 11). */
#define JCPU_GCCJIT_OPTIONAL_FUNCS(X) \
  X(context_add_driver_option)

typedef struct {
#define JCPU_GCCJIT_POINTER(n) __typeof__(gcc_jit_##n) *n;
  JCPU_GCCJIT_FUNCS(JCPU_GCCJIT_POINTER)
  JCPU_GCCJIT_OPTIONAL_FUNCS(JCPU_GCCJIT_POINTER)
#undef JCPU_GCCJIT_POINTER
} jcpu_gccjit_api;

extern jcpu_gccjit_api jcpu_gccjit;

/* Load the library (TC_GCCJIT, default libgccjit.so.0) and every function
** above, once per process (thread-safe; a forked compile worker inherits
** it). 0, or -1 with the reason in why ("libgccjit not available
** (libgccjit.so.0: cannot open shared object file ...)"). */
int jcpu_gccjit_load(char *why, size_t len);

#define gcc_jit_block_add_assignment jcpu_gccjit.block_add_assignment
#define gcc_jit_block_add_assignment_op jcpu_gccjit.block_add_assignment_op
#define gcc_jit_block_add_eval jcpu_gccjit.block_add_eval
#define gcc_jit_block_end_with_conditional jcpu_gccjit.block_end_with_conditional
#define gcc_jit_block_end_with_jump jcpu_gccjit.block_end_with_jump
#define gcc_jit_block_end_with_return jcpu_gccjit.block_end_with_return
#define gcc_jit_block_end_with_void_return jcpu_gccjit.block_end_with_void_return
#define gcc_jit_context_acquire jcpu_gccjit.context_acquire
#define gcc_jit_context_add_command_line_option jcpu_gccjit.context_add_command_line_option
#define gcc_jit_context_add_driver_option jcpu_gccjit.context_add_driver_option
#define gcc_jit_context_compile jcpu_gccjit.context_compile
#define gcc_jit_context_compile_to_file jcpu_gccjit.context_compile_to_file
#define gcc_jit_context_dump_to_file jcpu_gccjit.context_dump_to_file
#define gcc_jit_context_get_builtin_function jcpu_gccjit.context_get_builtin_function
#define gcc_jit_context_get_first_error jcpu_gccjit.context_get_first_error
#define gcc_jit_context_get_type jcpu_gccjit.context_get_type
#define gcc_jit_context_new_array_access jcpu_gccjit.context_new_array_access
#define gcc_jit_context_new_array_type jcpu_gccjit.context_new_array_type
#define gcc_jit_context_new_binary_op jcpu_gccjit.context_new_binary_op
#define gcc_jit_context_new_bitcast jcpu_gccjit.context_new_bitcast
#define gcc_jit_context_new_call jcpu_gccjit.context_new_call
#define gcc_jit_context_new_cast jcpu_gccjit.context_new_cast
#define gcc_jit_context_new_comparison jcpu_gccjit.context_new_comparison
#define gcc_jit_context_new_function jcpu_gccjit.context_new_function
#define gcc_jit_context_new_global jcpu_gccjit.context_new_global
#define gcc_jit_context_new_location jcpu_gccjit.context_new_location
#define gcc_jit_context_new_param jcpu_gccjit.context_new_param
#define gcc_jit_context_new_rvalue_from_double jcpu_gccjit.context_new_rvalue_from_double
#define gcc_jit_context_new_rvalue_from_long jcpu_gccjit.context_new_rvalue_from_long
#define gcc_jit_context_new_unary_op jcpu_gccjit.context_new_unary_op
#define gcc_jit_context_release jcpu_gccjit.context_release
#define gcc_jit_context_set_bool_option jcpu_gccjit.context_set_bool_option
#define gcc_jit_context_set_bool_print_errors_to_stderr jcpu_gccjit.context_set_bool_print_errors_to_stderr
#define gcc_jit_context_set_int_option jcpu_gccjit.context_set_int_option
#define gcc_jit_function_new_block jcpu_gccjit.function_new_block
#define gcc_jit_function_new_local jcpu_gccjit.function_new_local
#define gcc_jit_global_set_initializer jcpu_gccjit.global_set_initializer
#define gcc_jit_lvalue_as_rvalue jcpu_gccjit.lvalue_as_rvalue
#define gcc_jit_lvalue_get_address jcpu_gccjit.lvalue_get_address
#define gcc_jit_param_as_rvalue jcpu_gccjit.param_as_rvalue
#define gcc_jit_result_get_code jcpu_gccjit.result_get_code
#define gcc_jit_result_release jcpu_gccjit.result_release
#define gcc_jit_rvalue_get_type jcpu_gccjit.rvalue_get_type
#define gcc_jit_type_get_const jcpu_gccjit.type_get_const
#define gcc_jit_type_get_pointer jcpu_gccjit.type_get_pointer
#define gcc_jit_version_major jcpu_gccjit.version_major
#define gcc_jit_version_minor jcpu_gccjit.version_minor
#define gcc_jit_version_patchlevel jcpu_gccjit.version_patchlevel

#endif
