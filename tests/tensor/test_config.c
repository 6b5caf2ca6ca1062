/*
** test_config.c -- the configuration module: every boolean takes the same
** spellings, numbers are range-checked, and every value that is not
** understood gets exactly one warning line (and the default).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../src/tensor/tensor.h"

static const char *const vars[] = {
  "TC_COMPILE", "TC_HOT", "TC_RECOMPILE_LIMIT", "TC_NODE_LIMIT", "TC_ASYNC",
  "TC_JIT", "TC_JIT_WORKER", "TC_JIT_OPT", "TC_THREADS", "TC_SPIN_US",
  "TC_CACHE", "TC_CACHE_DIR", "TC_CACHE_MAX_MB",
  "TC_POOL_MAX_MB", "TC_REGIONS_MAX", "TC_KERNELS_MAX", "TC_LOG", "TC_DEBUG",
  "TC_STATS",
};

static void clear_env(void)
{
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    unsetenv(vars[i]);
}

/* Reload the configuration with stderr captured; returns the number of
** warning lines and leaves their text in out. */
static int reload_capturing(char *out, size_t len)
{
  fflush(stderr);
  FILE *tmp = tmpfile();
  assert_non_null(tmp);
  int saved = dup(2);
  dup2(fileno(tmp), 2);
  tensor_config_reload();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  rewind(tmp);
  size_t n = fread(out, 1, len - 1, tmp);
  out[n] = '\0';
  fclose(tmp);
  int lines = 0;
  for (char *p = out; (p = strstr(p, "tc[config]: ")); p++)
    lines++;
  return lines;
}

static void test_booleans(void **state)
{
  (void)state;
  static const char *const off[] = { "0", "false", "no", "off", "FALSE",
                                     "Off", "" };
  static const char *const on[] = { "1", "true", "yes", "on", "TRUE", "Yes" };
  char out[4096];
  for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
    clear_env();
    setenv("TC_COMPILE", off[i], 1);
    setenv("TC_ASYNC", off[i], 1);
    setenv("TC_JIT_WORKER", off[i], 1);
    assert_int_equal(reload_capturing(out, sizeof out), 0);
    assert_false(tensor_cfg()->compile);
    assert_int_equal(tensor_cfg()->jit_worker, off[i][0] == '\0');
    /* an empty value is an unset one: the default (on) */
    assert_int_equal(tensor_cfg()->async, off[i][0] == '\0');
  }
  for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
    clear_env();
    setenv("TC_COMPILE", on[i], 1);
    setenv("TC_CACHE", on[i], 1);
    assert_int_equal(reload_capturing(out, sizeof out), 0);
    assert_true(tensor_cfg()->compile);
    assert_true(tensor_cfg()->cache);
  }
}

static void test_defaults(void **state)
{
  (void)state;
  char out[4096];
  clear_env();
  setenv("HOME", "/home/someone", 1);
  unsetenv("XDG_CACHE_HOME");
  assert_int_equal(reload_capturing(out, sizeof out), 0);
  const tensor_config *c = tensor_cfg();
  assert_false(c->compile);
  assert_int_equal(c->hot, 2);
  assert_int_equal(c->recompile_limit, 8);
  assert_int_equal(c->node_limit, 2048);
  assert_true(c->async && c->jit && c->jit_worker && c->cache);
  assert_int_equal(c->threads, 0);
  assert_int_equal(c->spin_us, 50);
  assert_int_equal(c->jit_opt, 3);
  assert_int_equal(c->pool_max_mb, -1);
  assert_int_equal(c->cache_max_mb, 1024);
  assert_int_equal(c->log, 0);
  assert_string_equal(c->cache_dir, "/home/someone/.cache/tc");
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  assert_int_equal(reload_capturing(out, sizeof out), 0);
  assert_string_equal(tensor_cfg()->cache_dir, "/x/cache/tc");
  setenv("XDG_CACHE_HOME", "relative", 1);   /* not absolute: ignored */
  assert_int_equal(reload_capturing(out, sizeof out), 0);
  assert_string_equal(tensor_cfg()->cache_dir, "/home/someone/.cache/tc");
  setenv("TC_CACHE_DIR", "/store", 1);
  assert_int_equal(reload_capturing(out, sizeof out), 0);
  assert_string_equal(tensor_cfg()->cache_dir, "/store");
  unsetenv("XDG_CACHE_HOME");
}

static void test_values_set(void **state)
{
  (void)state;
  char out[4096];
  clear_env();
  setenv("TC_HOT", "5", 1);
  setenv("TC_RECOMPILE_LIMIT", "3", 1);
  setenv("TC_NODE_LIMIT", "100", 1);
  setenv("TC_THREADS", "3", 1);
  setenv("TC_SPIN_US", "0", 1);
  setenv("TC_POOL_MAX_MB", "0", 1);
  setenv("TC_CACHE_MAX_MB", "7", 1);
  setenv("TC_LOG", "regions,Fallback", 1);
  setenv("TC_DEBUG", "yes", 1);
  setenv("TC_JIT_OPT", "0", 1);
  assert_int_equal(reload_capturing(out, sizeof out), 0);
  const tensor_config *c = tensor_cfg();
  assert_int_equal(c->hot, 5);
  assert_int_equal(c->recompile_limit, 3);
  assert_int_equal(c->node_limit, 100);
  assert_int_equal(c->threads, 3);
  assert_int_equal(c->spin_us, 0);
  assert_int_equal(c->pool_max_mb, 0);
  assert_int_equal(c->cache_max_mb, 7);
  assert_int_equal(c->log, TC_LOG_REGIONS | TC_LOG_FALLBACK);
  assert_true(c->debug);
  assert_int_equal(c->jit_opt, 0);
  setenv("TC_LOG", "all", 1);
  assert_int_equal(reload_capturing(out, sizeof out), 0);
  assert_int_equal(tensor_cfg()->log, ~0u);
}

/* One warning per value not understood, naming it; defaults used. */
static void test_warnings(void **state)
{
  (void)state;
  char out[4096];
  clear_env();
  setenv("TC_COMPILE", "maybe", 1);
  setenv("TC_HOT", "abc", 1);
  setenv("TC_RECOMPILE_LIMIT", "0", 1);
  setenv("TC_THREADS", "-3", 1);
  setenv("TC_NODE_LIMIT", "12x", 1);
  setenv("TC_LOG", "regions,bogus", 1);
  setenv("TC_ASYNC", "2", 1);
  setenv("TC_JIT_OPT", "4", 1);
  setenv("TC_SPIN_US", "-1", 1);
  assert_int_equal(reload_capturing(out, sizeof out), 9);
  const char *names[] = { "TC_COMPILE=maybe", "TC_HOT=abc",
                          "TC_RECOMPILE_LIMIT=0", "TC_THREADS=-3",
                          "TC_NODE_LIMIT=12x", "TC_LOG=bogus",
                          "TC_ASYNC=2", "TC_JIT_OPT=4", "TC_SPIN_US=-1" };
  for (int i = 0; i < 9; i++)
    if (!strstr(out, names[i]))
      fail_msg("no warning naming %s in:\n%s", names[i], out);
  const tensor_config *c = tensor_cfg();
  assert_false(c->compile);
  assert_int_equal(c->hot, 2);
  assert_int_equal(c->recompile_limit, 8);
  assert_int_equal(c->threads, 0);
  assert_int_equal(c->node_limit, 2048);
  assert_true(c->async);
  assert_int_equal(c->jit_opt, 3);
  assert_int_equal(c->spin_us, 50);
  assert_int_equal(c->log, TC_LOG_REGIONS);   /* the known ones still count */
  clear_env();
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_booleans),
    cmocka_unit_test(test_defaults),
    cmocka_unit_test(test_values_set),
    cmocka_unit_test(test_warnings),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
