/*
** llama.c -- Llama-architecture inference written in ordinary tc ops:
** RMSNorm, rotary position embeddings (RoPE), causal multi-head attention
** over a KV cache, SwiGLU, greedy or temperature sampling. Weights come
** from a safetensors file with Hugging Face's Llama names (the layout of
** the public stories15M / stories110M checkpoints); `init` writes such a
** file with random weights, since none can be downloaded here. The model
** itself (config, load / init / save, forward, sampling) is in
** llama_model.c, which tc-bench's W12 shares; this file is the command line.
**
**   llama init stories15M|stories110M|tiny PATH [SEED]
**   llama run PATH [-n TOKENS] [-t TEMPERATURE] [-s SEED] [-m eager|compiled|both]
**             [-d cpu|cuda]
**
** `run` generates TOKENS tokens (default 64) after the BOS token, prints
** their ids, tokens/s, and with `-m both` (the default) runs eagerly and
** then with compilation on, checks that both produced the same tokens
** (compiled results are bitwise equal to eager ones) and reports how many
** kernels were compiled while decoding: the KV length grows every token,
** which must not mean a compile per token. `-d cuda` moves the model to
** the GPU first (llama_to): the same program, every op on the device.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tc.h>

#include "llama_model.h"

static void die(const char *what)
{
  const char *e = tc_last_error();
  fprintf(stderr, "llama: %s%s%s\n", what, e ? ": " : "", e ? e : "");
  exit(1);
}

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Random weights (normal, std 0.02; norms 1) in the checkpoint's layout. */
static int cmd_init(const char *name, const char *path, uint64_t seed)
{
  llama_config c;
  if (llama_preset(name, &c) < 0) {
    fprintf(stderr, "llama: unknown preset %s (stories15M, stories110M, "
            "tiny)\n", name);
    return 2;
  }
  llama_model m;
  if (llama_init(&m, &c, seed) < 0)
    die("init");
  if (llama_save(&m, path) < 0)
    die("tc_save");
  llama_free(&m);
  printf("llama: wrote %s (%s: dim %d, %d layers, %d heads, vocab %d)\n",
         path, name, c.dim, c.layers, c.heads, c.vocab);
  return 0;
}

/* -- Generation ------------------------------------------------------------------ */

typedef struct {
  double seconds;
  uint64_t compiled, launched, regions;
} run_stats;

static void generate(llama_model *m, int n, double temperature, uint64_t seed,
                     int *out, run_stats *rs)
{
  float *probs = malloc(sizeof *probs * (size_t)m->c.vocab);
  if (!probs)
    die("out of memory");
  uint64_t rng = seed ? seed : 1;
  tc_stats s0, s1;
  tc_stats_get(&s0);
  double t0 = now();
  int tok = 1;   /* BOS */
  for (int pos = 0; pos < n; pos++) {
    size_t mark = tc_scope_begin();
    tc_tensor *logits = llama_forward(m, tok, pos);
    if (!logits)
      die("forward");
    tok = llama_sample(logits, temperature, &rng, probs, m->c.vocab);
    if (tok < 0)
      die("sample");
    tc_scope_end(mark);
    out[pos] = tok;
  }
  rs->seconds = now() - t0;
  tc_stats_get(&s1);
  rs->compiled = s1.kernels_compiled - s0.kernels_compiled;
  rs->launched = s1.kernels_launched - s0.kernels_launched;
  rs->regions = s1.regions - s0.regions;
  free(probs);
}

static void report(const char *mode, const llama_model *m, int n, const int *toks,
                   const run_stats *rs)
{
  printf("%-8s %7.1f tokens/s  %6.2f ms/token  %5.1f kernels/token",
         mode, n / rs->seconds, 1e3 * rs->seconds / n,
         (double)rs->launched / n);
  if (strcmp(mode, "eager"))
    printf("  %llu kernels compiled while decoding",
           (unsigned long long)rs->compiled);
  printf("\n  tokens:");
  for (int i = 0; i < n && i < 24; i++)
    printf(" %d", toks[i]);
  printf("%s\n", n > 24 ? " ..." : "");
  (void)m;
}

static int cmd_run(int argc, char **argv)
{
  const char *path = argv[0], *mode = "both", *device = "cpu";
  int n = 64;
  double temperature = 0;
  uint64_t seed = 42;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-n"))
      n = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-t"))
      temperature = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "-s"))
      seed = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "-m"))
      mode = argv[i + 1];
    else if (!strcmp(argv[i], "-d"))
      device = argv[i + 1];
    else {
      fprintf(stderr, "llama: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  llama_model m;
  if (llama_load(&m, path) < 0)
    die("load");
  if (strcmp(device, "cpu") != 0 && llama_to(&m, device) < 0)
    die("moving the model");
  if (n < 1 || n > m.c.seq_len) {
    fprintf(stderr, "llama: -n must be 1..%d (the context)\n", m.c.seq_len);
    return 2;
  }
  printf("llama: %s: dim %d, hidden %d, %d layers, %d heads, vocab %d, "
         "context %d; %d tokens, temperature %g, on %s, %d threads\n", path,
         m.c.dim, m.c.hidden, m.c.layers, m.c.heads, m.c.vocab, m.c.seq_len,
         n, temperature, device, tc_threads());
  int *toks[2] = { calloc((size_t)n, sizeof(int)), calloc((size_t)n, sizeof(int)) };
  if (!toks[0] || !toks[1])
    die("out of memory");
  bool eager = strcmp(mode, "compiled") != 0, compiled = strcmp(mode, "eager") != 0;
  run_stats rs;
  if (eager) {
    tc_compile_set(false);
    generate(&m, n, temperature, seed, toks[0], &rs);
    report("eager", &m, n, toks[0], &rs);
  }
  if (compiled) {
    if (llama_reset_cache(&m) < 0)
      die("reset");
    tc_compile_set(true);
    generate(&m, n, temperature, seed, toks[1], &rs);
    report("compiled", &m, n, toks[1], &rs);
  }
  int rc = 0;
  if (eager && compiled) {
    bool same = memcmp(toks[0], toks[1], sizeof(int) * (size_t)n) == 0;
    printf("eager and compiled tokens %s\n", same ? "identical" : "DIFFER");
    rc = same ? 0 : 1;
  }
  free(toks[0]);
  free(toks[1]);
  llama_free(&m);
  return rc;
}

int main(int argc, char **argv)
{
  if (argc >= 4 && !strcmp(argv[1], "init"))
    return cmd_init(argv[2], argv[3], argc > 4 ? strtoull(argv[4], NULL, 10)
                                                : 1);
  if (argc >= 3 && !strcmp(argv[1], "run"))
    return cmd_run(argc - 2, argv + 2);
  fprintf(stderr,
          "usage: llama init stories15M|stories110M|tiny PATH [SEED]\n"
          "       llama run PATH [-n TOKENS] [-t TEMPERATURE] [-s SEED] "
          "[-m eager|compiled|both] [-d cpu|cuda]\n");
  return 2;
}
