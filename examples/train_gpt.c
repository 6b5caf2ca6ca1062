/*
** train_gpt.c -- train a character-level GPT (examples/gpt_model.c: pre-LN
** GPT-2 blocks with multi-head causal self-attention) with AdamW on a text
** file, print the loss per step and a generated sample at the end.
**
**   train_gpt [TEXT] [-n STEPS] [-s SEED] [-m eager|compiled|both]
**             [-k PRINT_EVERY] [-b BATCH] [-c CONTEXT] [-d DIM] [-l LAYERS]
**             [-H HEADS] [-r LR] [-g SAMPLE_CHARS] [-t TEMPERATURE]
**             [-D cpu|cuda]
**
** Defaults: /usr/share/common-licenses/GPL-3 (every Debian machine has it),
** 200 steps, seed 1, both, 4 layers, dim 128, 4 heads, context 64, batch
** 16, lr 1e-3. Batches are random windows of the text drawn by a seeded
** generator, the init is seeded: a run is deterministic. `-m both` trains
** eagerly, then again from the same init with tc_compile_set(true), and
** exits 1 unless every step's loss is bitwise the same in both (and the
** samples too). It also exits 1 when training over at least 8 steps does
** not lower the loss (the mean of the last quarter against the first).
** Each mode reports ms/step and kernels launched per step. `-D cuda`
** makes the model, its optimizer state and every batch on the GPU (the
** default device), so training runs there; the sample is drawn on the
** CPU from the probabilities copied back (gpt_sample).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tc.h>

#include "gpt_model.h"

typedef struct {
  const char *text, *mode, *device;
  int steps, every, sample_chars;
  uint64_t seed;
  double temperature;
  gpt_config c;
} options;

typedef struct {
  double *loss, *ms;
  uint64_t *kernels;
  int *sample;
  uint64_t compiled;   /* kernels JIT-compiled during training */
} run_log;

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(const double *v, int n)
{
  double *s = malloc(sizeof *s * (size_t)n);
  if (!s)
    return NAN;
  memcpy(s, v, sizeof *s * (size_t)n);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  free(s);
  return m;
}

static void die(const char *what)
{
  const char *e = tc_last_error();
  fprintf(stderr, "train_gpt: %s%s%s\n", what, e ? ": " : "", e ? e : "");
  exit(1);
}

/* The text as token ids (its distinct bytes in byte order) and the table
** from id back to byte. */
static uint8_t *load_text(const char *path, size_t *n, uint8_t *bytes,
                          int *vocab)
{
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "train_gpt: cannot open %s\n", path);
    exit(2);
  }
  size_t cap = 1 << 16, len = 0;
  uint8_t *d = malloc(cap);
  for (size_t got; d && (got = fread(d + len, 1, cap - len, f)) > 0;) {
    len += got;
    if (len == cap)
      d = realloc(d, cap *= 2);
  }
  fclose(f);
  if (!d)
    die("out of memory");
  int id[256];
  bool seen[256] = { false };
  for (size_t i = 0; i < len; i++)
    seen[d[i]] = true;
  *vocab = 0;
  for (int b = 0; b < 256; b++)
    if (seen[b]) {
      bytes[*vocab] = (uint8_t)b;
      id[b] = (*vocab)++;
    }
  for (size_t i = 0; i < len; i++)
    d[i] = (uint8_t)id[d[i]];
  *n = len;
  return d;
}

static void train(const options *o, const uint8_t *ids, size_t n,
                  const uint8_t *bytes, bool compiled, run_log *rl)
{
  tc_compile_set(compiled);
  const char *mode = compiled ? "compiled" : "eager";
  gpt_model m;
  if (gpt_init(&m, &o->c, o->seed) < 0)
    die("init");
  size_t win = (size_t)o->c.batch * (size_t)o->c.ctx;
  int64_t *xb = malloc(sizeof *xb * win), *yb = malloc(sizeof *yb * win);
  if (!xb || !yb)
    die("out of memory");
  uint64_t rng = o->seed;
  tc_stats s0, s1;
  tc_stats_get(&s0);
  uint64_t compiled0 = s0.kernels_compiled;
  for (int step = 1; step <= o->steps; step++) {
    double t0 = now_ms();
    size_t mark = tc_scope_begin();
    gpt_batch(ids, n, o->c.batch, o->c.ctx, &rng, xb, yb);
    tc_tensor *x = tc_from_data(TC_I64, TC_SHAPE(o->c.batch, o->c.ctx), xb,
                                sizeof *xb * win);
    tc_tensor *y = tc_from_data(TC_I64, TC_SHAPE(o->c.batch, o->c.ctx), yb,
                                sizeof *yb * win);
    double loss;
    if (gpt_train_step(&m, x, y, &loss) < 0) {
      fprintf(stderr, "train_gpt: %s step %d: %s\n", mode, step,
              tc_last_error() ? tc_last_error() : "failed");
      exit(1);
    }
    tc_scope_end(mark);
    tc_stats_get(&s1);
    rl->loss[step - 1] = loss;
    rl->ms[step - 1] = now_ms() - t0;
    rl->kernels[step - 1] = s1.kernels_launched - s0.kernels_launched;
    s0 = s1;
    if (step == 1 || step % o->every == 0 || step == o->steps)
      printf("%-8s step %4d  loss %.6f  %8.2f ms  %5llu kernels\n", mode,
             step, loss, rl->ms[step - 1],
             (unsigned long long)rl->kernels[step - 1]);
  }
  rl->compiled = s1.kernels_compiled - compiled0;
  rl->sample[0] = ids[0];
  if (gpt_sample(&m, rl->sample, 1, o->sample_chars, o->temperature,
                 o->seed) < 0)
    die("sample");
  int half = o->steps / 2;   /* the steady state: compiles are done */
  printf("%-8s %.2f ms/step (median), %.2f over the last %d steps, %llu "
         "kernels in the last step, %llu kernels compiled\n", mode,
         median(rl->ms, o->steps), median(rl->ms + half, o->steps - half),
         o->steps - half, (unsigned long long)rl->kernels[o->steps - 1],
         (unsigned long long)rl->compiled);
  printf("%-8s sample: \"", mode);
  for (int i = 0; i <= o->sample_chars; i++) {
    int ch = bytes[rl->sample[i]];
    if (ch == '"' || ch == '\\')
      printf("\\%c", ch);
    else if (ch == '\n')
      printf("\\n");
    else
      putchar(ch >= 32 && ch < 127 ? ch : '?');
  }
  printf("\"\n");
  free(xb);
  free(yb);
  gpt_free(&m);
}

static run_log log_new(const options *o)
{
  run_log rl = {
    calloc((size_t)o->steps, sizeof(double)),
    calloc((size_t)o->steps, sizeof(double)),
    calloc((size_t)o->steps, sizeof(uint64_t)),
    calloc((size_t)o->sample_chars + 1, sizeof(int)), 0,
  };
  if (!rl.loss || !rl.ms || !rl.kernels || !rl.sample)
    die("out of memory");
  return rl;
}

static void log_free(run_log *rl)
{
  free(rl->loss);
  free(rl->ms);
  free(rl->kernels);
  free(rl->sample);
}

/* The loss went down: the mean of the last quarter of the steps is below
** the first step's loss (only judged over 8 steps or more). */
static bool learned(const options *o, const run_log *rl)
{
  if (o->steps < 8)
    return true;
  int q = o->steps / 4;
  double mean = 0;
  for (int i = o->steps - q; i < o->steps; i++)
    mean += rl->loss[i] / q;
  printf("loss: first step %.4f, mean of the last %d steps %.4f\n",
         rl->loss[0], q, mean);
  return mean < rl->loss[0];
}

static int usage(void)
{
  fprintf(stderr,
          "usage: train_gpt [TEXT] [-n STEPS] [-s SEED] "
          "[-m eager|compiled|both] [-k PRINT_EVERY]\n"
          "                 [-b BATCH] [-c CONTEXT] [-d DIM] [-l LAYERS] "
          "[-H HEADS] [-r LR]\n"
          "                 [-g SAMPLE_CHARS] [-t TEMPERATURE] "
          "[-D cpu|cuda]\n");
  return 2;
}

int main(int argc, char **argv)
{
  options o = {
    .text = "/usr/share/common-licenses/GPL-3", .mode = "both",
    .device = "cpu",
    .steps = 200, .every = 10, .sample_chars = 200, .seed = 1,
    .temperature = 0.8,
    .c = { .ctx = 64, .dim = 128, .layers = 4, .heads = 4, .batch = 16,
           .lr = 1e-3, .weight_decay = 0.01 },
  };
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] != '-') {
      o.text = a;
      continue;
    }
    if (i + 1 >= argc || a[1] == 0 || a[2] != 0)
      return usage();
    const char *v = argv[++i];
    switch (a[1]) {
    case 'n': o.steps = atoi(v); break;
    case 's': o.seed = strtoull(v, NULL, 10); break;
    case 'm': o.mode = v; break;
    case 'k': o.every = atoi(v); break;
    case 'b': o.c.batch = atoi(v); break;
    case 'c': o.c.ctx = atoi(v); break;
    case 'd': o.c.dim = atoi(v); break;
    case 'l': o.c.layers = atoi(v); break;
    case 'H': o.c.heads = atoi(v); break;
    case 'r': o.c.lr = atof(v); break;
    case 'g': o.sample_chars = atoi(v); break;
    case 't': o.temperature = atof(v); break;
    case 'D': o.device = v; break;
    default: return usage();
    }
  }
  bool eager = !strcmp(o.mode, "eager") || !strcmp(o.mode, "both");
  bool compiled = !strcmp(o.mode, "compiled") || !strcmp(o.mode, "both");
  if ((!eager && !compiled) || o.steps < 1 || o.every < 1 ||
      o.sample_chars < 0 || !(o.temperature > 0) || o.c.batch < 1 ||
      o.c.ctx < 1 || o.c.dim < 1 || o.c.layers < 1 || o.c.heads < 1 ||
      o.c.dim % o.c.heads)
    return usage();

  if (tc_set_default_device(o.device) < 0)
    die("-D");
  size_t n;
  uint8_t bytes[256];
  uint8_t *ids = load_text(o.text, &n, bytes, &o.c.vocab);
  if (n <= (size_t)o.c.ctx + 1) {
    fprintf(stderr, "train_gpt: %s is shorter than the context\n", o.text);
    return 2;
  }
  printf("train_gpt: %s: %zu bytes, vocab %d; %d layers, dim %d, %d heads, "
         "context %d, batch %d; AdamW lr %g; %d steps, seed %llu, on %s, %d "
         "threads\n", o.text, n, o.c.vocab, o.c.layers, o.c.dim, o.c.heads,
         o.c.ctx, o.c.batch, o.c.lr, o.steps, (unsigned long long)o.seed,
         o.device, tc_threads());

  run_log rl[2] = { log_new(&o), log_new(&o) };
  int rc = 0;
  if (eager)
    train(&o, ids, n, bytes, false, &rl[0]);
  if (compiled)
    train(&o, ids, n, bytes, true, &rl[1]);
  if (!learned(&o, &rl[compiled]))
    rc = 1, printf("the loss did not go down\n");
  if (eager && compiled) {
    int bad = -1;
    for (int i = 0; i < o.steps && bad < 0; i++)
      if (memcmp(&rl[0].loss[i], &rl[1].loss[i], sizeof(double)))
        bad = i;
    bool same_sample = !memcmp(rl[0].sample, rl[1].sample,
                               sizeof(int) * (size_t)(o.sample_chars + 1));
    if (bad >= 0)
      printf("eager and compiled losses DIFFER from step %d: %a vs %a\n",
             bad + 1, rl[0].loss[bad], rl[1].loss[bad]);
    else
      printf("eager and compiled losses bitwise equal over %d steps\n",
             o.steps);
    if (!same_sample)
      printf("eager and compiled samples DIFFER\n");
    int half = o.steps / 2;
    printf("speedup compiled / eager: %.2fx (median ms/step over the last "
           "%d steps)\n", median(rl[0].ms + half, o.steps - half) /
           median(rl[1].ms + half, o.steps - half), o.steps - half);
    if (bad >= 0 || !same_sample)
      rc = 1;
  }
  log_free(&rl[0]);
  log_free(&rl[1]);
  free(ids);
  return rc;
}
