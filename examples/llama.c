/*
** llama.c -- Llama-architecture inference written in ordinary tc ops:
** RMSNorm, rotary position embeddings (RoPE), causal multi-head attention
** over a KV cache, SwiGLU, greedy or temperature sampling. Weights come
** from a safetensors file with Hugging Face's Llama names (the layout of
** the public stories15M / stories110M checkpoints); `init` writes such a
** file with random weights, since none can be downloaded here.
**
**   llama init stories15M|stories110M|tiny PATH [SEED]
**   llama run PATH [-n TOKENS] [-t TEMPERATURE] [-s SEED] [-m eager|compiled|both]
**
** `run` generates TOKENS tokens (default 64) after the BOS token, prints
** their ids, tokens/s, and with `-m both` (the default) runs eagerly and
** then with compilation on, checks that both produced the same tokens
** (compiled results are bitwise equal to eager ones) and reports how many
** kernels were compiled while decoding: the KV length grows every token,
** which must not mean a compile per token.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tc.h>

typedef struct {
  int dim, hidden, layers, heads, vocab, seq_len;
  double eps, theta;
} config;

typedef struct {
  tc_tensor *attn_norm, *wq, *wk, *wv, *wo;
  tc_tensor *ffn_norm, *w_gate, *w_up, *w_down;
  tc_tensor *k_cache, *v_cache;     /* [seq_len, dim] each */
} layer;

typedef struct {
  config c;
  tc_tensor *embed, *norm, *lm_head;
  tc_tensor *rope_cos, *rope_sin;   /* [seq_len, head_dim / 2] */
  layer *l;
} model;

static void die(const char *what)
{
  const char *e = tc_last_error();
  fprintf(stderr, "llama: %s%s%s\n", what, e ? ": " : "", e ? e : "");
  exit(1);
}

static tc_tensor *ck(tc_tensor *t, const char *what)
{
  if (!t)
    die(what);
  return t;
}

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* -- Checkpoints ------------------------------------------------------------ */

static int preset(const char *name, config *c)
{
  static const struct {
    const char *name;
    config c;
  } presets[] = {
    { "stories15M", { 288, 768, 6, 6, 32000, 256, 1e-5, 10000 } },
    { "stories110M", { 768, 2048, 12, 12, 32000, 1024, 1e-5, 10000 } },
    { "tiny", { 64, 172, 2, 4, 512, 64, 1e-5, 10000 } },
  };
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
    if (strcmp(presets[i].name, name) == 0) {
      *c = presets[i].c;
      return 0;
    }
  return -1;
}

#define NAME_MAX_LEN 96

static void layer_name(char *buf, int l, const char *what)
{
  snprintf(buf, NAME_MAX_LEN, "model.layers.%d.%s.weight", l, what);
}

static const char *const layer_parts[] = {
  "input_layernorm", "self_attn.q_proj", "self_attn.k_proj",
  "self_attn.v_proj", "self_attn.o_proj", "post_attention_layernorm",
  "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
};
#define NPARTS ((int)(sizeof layer_parts / sizeof layer_parts[0]))

/* Random weights (normal, std 0.02; norms 1) in the checkpoint's layout. */
static int cmd_init(const char *name, const char *path, uint64_t seed)
{
  config c;
  if (preset(name, &c) < 0) {
    fprintf(stderr, "llama: unknown preset %s (stories15M, stories110M, "
            "tiny)\n", name);
    return 2;
  }
  int n = 2 + c.layers * NPARTS;
  char (*names)[NAME_MAX_LEN] = calloc((size_t)n, NAME_MAX_LEN);
  const char **np = calloc((size_t)n, sizeof *np);
  tc_tensor **ts = calloc((size_t)n, sizeof *ts);
  if (!names || !np || !ts)
    die("out of memory");
  int k = 0;
  size_t mark = tc_scope_begin();
  for (int i = 0; i < n; i++)
    np[i] = names[i];
  snprintf(names[k], NAME_MAX_LEN, "model.embed_tokens.weight");
  ts[k++] = ck(tc_mul_scalar(ck(tc_randn(TC_F32, TC_SHAPE(c.vocab, c.dim),
                                         seed), "randn"), 0.02), "init");
  for (int l = 0; l < c.layers; l++)
    for (int p = 0; p < NPARTS; p++) {
      layer_name(names[k], l, layer_parts[p]);
      int64_t rows = p >= 6 && p < 8 ? c.hidden : c.dim;
      int64_t cols = p == 8 ? c.hidden : c.dim;
      uint64_t s = seed + 1 + (uint64_t)k;
      if (p == 0 || p == 5)
        ts[k++] = ck(tc_ones(TC_F32, TC_SHAPE(c.dim)), "ones");
      else
        ts[k++] = ck(tc_mul_scalar(ck(tc_randn(TC_F32, TC_SHAPE(rows, cols),
                                               s), "randn"), 0.02), "init");
    }
  snprintf(names[k], NAME_MAX_LEN, "model.norm.weight");
  ts[k++] = ck(tc_ones(TC_F32, TC_SHAPE(c.dim)), "ones");
  char meta[7][24];
  int vals[] = { c.dim, c.hidden, c.layers, c.heads, c.vocab, c.seq_len };
  const char *keys[] = { "dim", "hidden_dim", "n_layers", "n_heads",
                         "vocab_size", "seq_len", "norm_eps" };
  const char *values[7];
  for (int i = 0; i < 6; i++) {
    snprintf(meta[i], sizeof meta[i], "%d", vals[i]);
    values[i] = meta[i];
  }
  snprintf(meta[6], sizeof meta[6], "%g", c.eps);
  values[6] = meta[6];
  if (tc_save_meta(path, k, np, (tc_tensor *const *)ts, 7, keys, values) < 0)
    die("tc_save");
  tc_scope_end(mark);
  printf("llama: wrote %s (%s: dim %d, %d layers, %d heads, vocab %d)\n",
         path, name, c.dim, c.layers, c.heads, c.vocab);
  free(names);
  free(np);
  free(ts);
  return 0;
}

static int meta_int(const tc_file *f, const char *key, int dflt)
{
  const char *v = tc_file_metadata(f, key);
  return v ? atoi(v) : dflt;
}

static tc_tensor *weight(tc_file *f, const char *name)
{
  tc_tensor *t = tc_file_get(f, name);
  if (!t) {
    fprintf(stderr, "llama: the checkpoint has no %s\n", name);
    die("load");
  }
  return t;
}

/* cos and sin of pos * theta^(-2i / head_dim), computed in double. */
static void rope_tables(model *m)
{
  int h2 = m->c.dim / m->c.heads / 2, n = m->c.seq_len;
  float *cs = malloc(sizeof *cs * (size_t)n * (size_t)h2 * 2);
  if (!cs)
    die("out of memory");
  float *sn = cs + (size_t)n * (size_t)h2;
  for (int p = 0; p < n; p++)
    for (int i = 0; i < h2; i++) {
      double a = p * pow(m->c.theta, -2.0 * i / (2.0 * h2));
      cs[p * h2 + i] = (float)cos(a);
      sn[p * h2 + i] = (float)sin(a);
    }
  size_t nb = sizeof *cs * (size_t)n * (size_t)h2;
  m->rope_cos = ck(tc_from_data(TC_F32, TC_SHAPE(n, h2), cs, nb), "rope");
  m->rope_sin = ck(tc_from_data(TC_F32, TC_SHAPE(n, h2), sn, nb), "rope");
  free(cs);
}

static void model_load(model *m, const char *path)
{
  tc_file *f = tc_load(path);
  if (!f)
    die("tc_load");
  config *c = &m->c;
  m->embed = weight(f, "model.embed_tokens.weight");
  c->vocab = (int)tc_size(m->embed, 0);
  c->dim = (int)tc_size(m->embed, 1);
  c->layers = meta_int(f, "n_layers", 0);
  c->heads = meta_int(f, "n_heads", 0);
  c->seq_len = meta_int(f, "seq_len", 256);
  const char *eps = tc_file_metadata(f, "norm_eps");
  c->eps = eps ? atof(eps) : 1e-5;
  c->theta = 10000;
  if (c->layers <= 0)
    while (1) {   /* count the layers present */
      char nm[NAME_MAX_LEN];
      layer_name(nm, c->layers, "input_layernorm");
      tc_tensor *t = tc_file_get(f, nm);
      if (!t)
        break;
      tc_release(t);
      c->layers++;
    }
  if (c->heads <= 0 || c->dim % c->heads || (c->dim / c->heads) % 2)
    die("the checkpoint needs an n_heads metadata entry that divides dim "
        "into even head sizes");
  m->norm = weight(f, "model.norm.weight");
  m->lm_head = tc_file_get(f, "lm_head.weight");
  if (!m->lm_head)   /* tied to the embedding, as in the stories models */
    m->lm_head = tc_retain(m->embed);
  m->l = calloc((size_t)c->layers, sizeof *m->l);
  if (!m->l)
    die("out of memory");
  for (int l = 0; l < c->layers; l++) {
    tc_tensor **w[NPARTS] = {
      &m->l[l].attn_norm, &m->l[l].wq, &m->l[l].wk, &m->l[l].wv,
      &m->l[l].wo, &m->l[l].ffn_norm, &m->l[l].w_gate, &m->l[l].w_up,
      &m->l[l].w_down,
    };
    for (int p = 0; p < NPARTS; p++) {
      char nm[NAME_MAX_LEN];
      layer_name(nm, l, layer_parts[p]);
      *w[p] = weight(f, nm);
    }
    m->l[l].k_cache = ck(tc_zeros(TC_F32, TC_SHAPE(c->seq_len, c->dim)),
                         "kv cache");
    m->l[l].v_cache = ck(tc_zeros(TC_F32, TC_SHAPE(c->seq_len, c->dim)),
                         "kv cache");
  }
  c->hidden = (int)tc_size(m->l[0].w_gate, 0);
  tc_file_close(f);   /* the tensors keep the mapping */
  rope_tables(m);
}

static void model_free(model *m)
{
  for (int l = 0; l < m->c.layers; l++) {
    tc_tensor *all[] = { m->l[l].attn_norm, m->l[l].wq, m->l[l].wk,
                         m->l[l].wv, m->l[l].wo, m->l[l].ffn_norm,
                         m->l[l].w_gate, m->l[l].w_up, m->l[l].w_down,
                         m->l[l].k_cache, m->l[l].v_cache };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
      tc_release(all[i]);
  }
  free(m->l);
  tc_release(m->embed);
  tc_release(m->norm);
  tc_release(m->lm_head);
  tc_release(m->rope_cos);
  tc_release(m->rope_sin);
}

/* -- The forward pass, one token (in a scope: every temporary goes) ---------- */

static tc_tensor *linear(tc_tensor *x, tc_tensor *w)   /* x @ w^T */
{
  return tc_matmul(x, tc_transpose(w, 0, 1));
}

static tc_tensor *rms_norm(tc_tensor *x, tc_tensor *g, double eps)
{
  tc_tensor *ms = tc_mean(tc_mul(x, x), -1, true);
  return tc_mul(tc_mul(x, tc_rsqrt(tc_add_scalar(ms, eps))), g);
}

/* a and b side by side along the last dim (copies into a new tensor). */
static tc_tensor *cat_last(tc_tensor *a, tc_tensor *b)
{
  int nd = tc_ndim(a);
  int64_t shape[TC_MAX_DIMS], na = tc_size(a, -1), nb = tc_size(b, -1);
  for (int d = 0; d < nd; d++)
    shape[d] = tc_size(a, d);
  shape[nd - 1] = na + nb;
  tc_tensor *out = tc_empty(tc_dtype_of(a), nd, shape);
  if (!out || tc_copy_(tc_slice(out, -1, 0, na, 1), a) < 0 ||
      tc_copy_(tc_slice(out, -1, na, na + nb, 1), b) < 0)
    return NULL;
  return out;
}

/* Hugging Face's rotary embedding: x (heads, hd) rotated by pos, with the
** two halves of each head as the pairs (rotate_half). */
static tc_tensor *rope(const model *m, tc_tensor *x, int pos)
{
  int64_t h2 = m->c.dim / m->c.heads / 2;
  tc_tensor *c = tc_slice(m->rope_cos, 0, pos, pos + 1, 1);
  tc_tensor *s = tc_slice(m->rope_sin, 0, pos, pos + 1, 1);
  tc_tensor *x1 = tc_slice(x, -1, 0, h2, 1), *x2 = tc_slice(x, -1, h2, 2 * h2, 1);
  return cat_last(tc_sub(tc_mul(x1, c), tc_mul(x2, s)),
                  tc_add(tc_mul(x2, c), tc_mul(x1, s)));
}

/* Causal attention of q (1, dim) over cache rows [0, pos]. */
static tc_tensor *attention(const model *m, const layer *ly, tc_tensor *q,
                            int pos)
{
  int64_t H = m->c.heads, hd = m->c.dim / m->c.heads, T = pos + 1;
  tc_tensor *k = tc_reshape(tc_slice(ly->k_cache, 0, 0, T, 1), TC_SHAPE(T, H, hd));
  tc_tensor *v = tc_reshape(tc_slice(ly->v_cache, 0, 0, T, 1), TC_SHAPE(T, H, hd));
  tc_tensor *kt = tc_permute(k, 3, (const int[]){ 1, 2, 0 });   /* H hd T */
  tc_tensor *vh = tc_permute(v, 3, (const int[]){ 1, 0, 2 });   /* H T hd */
  tc_tensor *q3 = tc_reshape(q, TC_SHAPE(H, 1, hd));
  tc_tensor *sc = tc_mul_scalar(tc_matmul(q3, kt), 1.0 / sqrt((double)hd));
  tc_tensor *o = tc_matmul(tc_softmax(sc, -1), vh);                /* H 1 hd */
  return tc_reshape(o, TC_SHAPE(1, m->c.dim));
}

/* Logits (1, vocab) for token tok at position pos; fills the KV caches. */
static tc_tensor *forward(const model *m, int tok, int pos)
{
  const config *c = &m->c;
  tc_tensor *x = tc_slice(m->embed, 0, tok, tok + 1, 1);   /* a view */
  for (int l = 0; l < c->layers; l++) {
    const layer *ly = &m->l[l];
    tc_tensor *h = rms_norm(x, ly->attn_norm, c->eps);
    int64_t H = c->heads, hd = c->dim / c->heads;
    tc_tensor *q = rope(m, tc_reshape(linear(h, ly->wq), TC_SHAPE(H, hd)), pos);
    tc_tensor *k = rope(m, tc_reshape(linear(h, ly->wk), TC_SHAPE(H, hd)), pos);
    tc_tensor *v = linear(h, ly->wv);
    if (tc_copy_(tc_slice(ly->k_cache, 0, pos, pos + 1, 1),
                 tc_reshape(k, TC_SHAPE(1, c->dim))) < 0 ||
        tc_copy_(tc_slice(ly->v_cache, 0, pos, pos + 1, 1), v) < 0)
      return NULL;
    x = tc_add(x, linear(attention(m, ly, tc_reshape(q, TC_SHAPE(1, c->dim)),
                                   pos), ly->wo));
    h = rms_norm(x, ly->ffn_norm, c->eps);
    tc_tensor *ff = tc_mul(tc_silu(linear(h, ly->w_gate)), linear(h, ly->w_up));
    x = tc_add(x, linear(ff, ly->w_down));
  }
  return linear(rms_norm(x, m->norm, c->eps), m->lm_head);
}

/* -- Sampling ------------------------------------------------------------------- */

static double uniform01(uint64_t *s)   /* xorshift64* */
{
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return (double)((*s * 0x2545F4914F6CDD1Dull) >> 11) * 0x1p-53;
}

static int sample(tc_tensor *logits, double temperature, uint64_t *rng,
                  float *probs, int vocab)
{
  if (temperature <= 0) {
    double id;
    if (tc_item(tc_argmax(logits, -1, false), &id) < 0)
      die("argmax");
    return (int)id;
  }
  tc_tensor *p = tc_softmax(tc_mul_scalar(logits, 1.0 / temperature), -1);
  if (tc_copy_to(p, probs, sizeof *probs * (size_t)vocab) < 0)
    die("softmax");
  double u = uniform01(rng), acc = 0;
  for (int i = 0; i < vocab; i++)
    if ((acc += probs[i]) > u)
      return i;
  return vocab - 1;
}

/* -- Generation ------------------------------------------------------------------ */

typedef struct {
  double seconds;
  uint64_t compiled, launched, regions;
} run_stats;

static void generate(model *m, int n, double temperature, uint64_t seed,
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
    tc_tensor *logits = forward(m, tok, pos);
    if (!logits)
      die("forward");
    tok = sample(logits, temperature, &rng, probs, m->c.vocab);
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

static void reset_cache(model *m)
{
  for (int l = 0; l < m->c.layers; l++)
    if (tc_fill_(m->l[l].k_cache, 0) < 0 || tc_fill_(m->l[l].v_cache, 0) < 0)
      die("reset");
}

static void report(const char *mode, const model *m, int n, const int *toks,
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
  const char *path = argv[0], *mode = "both";
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
    else {
      fprintf(stderr, "llama: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  model m = { 0 };
  model_load(&m, path);
  if (n < 1 || n > m.c.seq_len) {
    fprintf(stderr, "llama: -n must be 1..%d (the context)\n", m.c.seq_len);
    return 2;
  }
  printf("llama: %s: dim %d, hidden %d, %d layers, %d heads, vocab %d, "
         "context %d; %d tokens, temperature %g, %d threads\n", path, m.c.dim,
         m.c.hidden, m.c.layers, m.c.heads, m.c.vocab, m.c.seq_len, n,
         temperature, tc_threads());
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
    reset_cache(&m);
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
  model_free(&m);
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
          "[-m eager|compiled|both]\n");
  return 2;
}
