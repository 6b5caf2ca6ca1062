/*
** llama_model.c -- the Llama model of llama_model.h: presets, random
** weights, safetensors save and load, the forward pass of one token over
** a KV cache, and sampling.
*/
#include "llama_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -- Checkpoints ------------------------------------------------------------ */

int llama_preset(const char *name, llama_config *c)
{
  static const struct {
    const char *name;
    llama_config c;
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

/* Layer l's weights in the checkpoint's order (layer_parts). */
static void layer_slots(llama_layer *ly, tc_tensor **w[NPARTS])
{
  tc_tensor **s[NPARTS] = {
    &ly->attn_norm, &ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->ffn_norm,
    &ly->w_gate, &ly->w_up, &ly->w_down,
  };
  memcpy(w, s, sizeof s);
}

/* cos and sin of pos * theta^(-2i / head_dim), computed in double. */
static int rope_tables(llama_model *m)
{
  int h2 = m->c.dim / m->c.heads / 2, n = m->c.seq_len;
  float *cs = malloc(sizeof *cs * (size_t)n * (size_t)h2 * 2);
  if (!cs) {
    fprintf(stderr, "llama: out of memory\n");
    return -1;
  }
  float *sn = cs + (size_t)n * (size_t)h2;
  for (int p = 0; p < n; p++)
    for (int i = 0; i < h2; i++) {
      double a = p * pow(m->c.theta, -2.0 * i / (2.0 * h2));
      cs[p * h2 + i] = (float)cos(a);
      sn[p * h2 + i] = (float)sin(a);
    }
  size_t nb = sizeof *cs * (size_t)n * (size_t)h2;
  m->rope_cos = tc_from_data(TC_F32, TC_SHAPE(n, h2), cs, nb);
  m->rope_sin = tc_from_data(TC_F32, TC_SHAPE(n, h2), sn, nb);
  free(cs);
  return m->rope_cos && m->rope_sin ? 0 : -1;
}

/* The KV caches and RoPE tables of a model whose weights are in place. */
static int model_state(llama_model *m)
{
  const llama_config *c = &m->c;
  for (int l = 0; l < c->layers; l++) {
    m->l[l].k_cache = tc_zeros(TC_F32, TC_SHAPE(c->seq_len, c->dim));
    m->l[l].v_cache = tc_zeros(TC_F32, TC_SHAPE(c->seq_len, c->dim));
    if (!m->l[l].k_cache || !m->l[l].v_cache)
      return -1;
  }
  return rope_tables(m);
}

/* randn(shape, seed) * 0.02, a new reference. */
static tc_tensor *random_weight(int64_t rows, int64_t cols, uint64_t seed)
{
  tc_tensor *r = cols ? tc_randn(TC_F32, TC_SHAPE(rows, cols), seed)
                      : tc_randn(TC_F32, TC_SHAPE(rows), seed);
  tc_tensor *w = tc_mul_scalar(r, 0.02);
  tc_release(r);
  return w;
}

/* Random weights (normal, std 0.02; norms 1) in the checkpoint's layout:
** the embedding from seed, the weight at index k of the file's order from
** seed + 1 + k. */
int llama_init(llama_model *m, const llama_config *c, uint64_t seed)
{
  memset(m, 0, sizeof *m);
  m->c = *c;
  m->l = calloc((size_t)c->layers, sizeof *m->l);
  if (!m->l) {
    fprintf(stderr, "llama: out of memory\n");
    return -1;
  }
  if (!(m->embed = random_weight(c->vocab, c->dim, seed)))
    return -1;
  int k = 1;
  for (int l = 0; l < c->layers; l++) {
    tc_tensor **w[NPARTS];
    layer_slots(&m->l[l], w);
    for (int p = 0; p < NPARTS; p++, k++) {
      int64_t rows = p >= 6 && p < 8 ? c->hidden : c->dim;
      int64_t cols = p == 8 ? c->hidden : c->dim;
      *w[p] = p == 0 || p == 5 ? tc_ones(TC_F32, TC_SHAPE(c->dim))
                               : random_weight(rows, cols, seed + 1 + (uint64_t)k);
      if (!*w[p])
        return -1;
    }
  }
  if (!(m->norm = tc_ones(TC_F32, TC_SHAPE(c->dim))))
    return -1;
  m->lm_head = tc_retain(m->embed);   /* tied, as in the stories models */
  return model_state(m);
}

int llama_save(const llama_model *m, const char *path)
{
  const llama_config *c = &m->c;
  int n = 2 + c->layers * NPARTS;
  char (*names)[NAME_MAX_LEN] = calloc((size_t)n, NAME_MAX_LEN);
  const char **np = calloc((size_t)n, sizeof *np);
  tc_tensor **ts = calloc((size_t)n, sizeof *ts);
  int rc = -1;
  if (!names || !np || !ts) {
    fprintf(stderr, "llama: out of memory\n");
    goto out;
  }
  int k = 0;
  for (int i = 0; i < n; i++)
    np[i] = names[i];
  snprintf(names[k], NAME_MAX_LEN, "model.embed_tokens.weight");
  ts[k++] = m->embed;
  for (int l = 0; l < c->layers; l++) {
    tc_tensor **w[NPARTS];
    layer_slots(&m->l[l], w);
    for (int p = 0; p < NPARTS; p++) {
      layer_name(names[k], l, layer_parts[p]);
      ts[k++] = *w[p];
    }
  }
  snprintf(names[k], NAME_MAX_LEN, "model.norm.weight");
  ts[k++] = m->norm;
  char meta[7][24];
  int vals[] = { c->dim, c->hidden, c->layers, c->heads, c->vocab, c->seq_len };
  const char *keys[] = { "dim", "hidden_dim", "n_layers", "n_heads",
                         "vocab_size", "seq_len", "norm_eps" };
  const char *values[7];
  for (int i = 0; i < 6; i++) {
    snprintf(meta[i], sizeof meta[i], "%d", vals[i]);
    values[i] = meta[i];
  }
  snprintf(meta[6], sizeof meta[6], "%g", c->eps);
  values[6] = meta[6];
  rc = tc_save_meta(path, k, np, (tc_tensor *const *)ts, 7, keys, values);
out:
  free(names);
  free(np);
  free(ts);
  return rc < 0 ? -1 : 0;
}

static int meta_int(const tc_file *f, const char *key, int dflt)
{
  const char *v = tc_file_metadata(f, key);
  return v ? atoi(v) : dflt;
}

static tc_tensor *weight(tc_file *f, const char *name)
{
  tc_tensor *t = tc_file_get(f, name);
  if (!t)
    fprintf(stderr, "llama: the checkpoint has no %s\n", name);
  return t;
}

int llama_load(llama_model *m, const char *path)
{
  memset(m, 0, sizeof *m);
  tc_file *f = tc_load(path);
  if (!f)
    return -1;
  int rc = -1;
  llama_config *c = &m->c;
  if (!(m->embed = weight(f, "model.embed_tokens.weight")))
    goto out;
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
  if (c->heads <= 0 || c->dim % c->heads || (c->dim / c->heads) % 2) {
    fprintf(stderr, "llama: the checkpoint needs an n_heads metadata entry "
            "that divides dim into even head sizes\n");
    goto out;
  }
  if (!(m->norm = weight(f, "model.norm.weight")))
    goto out;
  m->lm_head = tc_file_get(f, "lm_head.weight");
  if (!m->lm_head)   /* tied to the embedding, as in the stories models */
    m->lm_head = tc_retain(m->embed);
  m->l = calloc((size_t)c->layers, sizeof *m->l);
  if (!m->l) {
    fprintf(stderr, "llama: out of memory\n");
    goto out;
  }
  for (int l = 0; l < c->layers; l++) {
    tc_tensor **w[NPARTS];
    layer_slots(&m->l[l], w);
    for (int p = 0; p < NPARTS; p++) {
      char nm[NAME_MAX_LEN];
      layer_name(nm, l, layer_parts[p]);
      if (!(*w[p] = weight(f, nm)))
        goto out;
    }
  }
  c->hidden = (int)tc_size(m->l[0].w_gate, 0);
  rc = model_state(m);
out:
  tc_file_close(f);   /* the tensors keep the mapping */
  return rc;
}

void llama_free(llama_model *m)
{
  for (int l = 0; m->l && l < m->c.layers; l++) {
    tc_tensor **w[NPARTS];
    layer_slots(&m->l[l], w);
    for (int p = 0; p < NPARTS; p++)
      tc_release(*w[p]);
    tc_release(m->l[l].k_cache);
    tc_release(m->l[l].v_cache);
  }
  free(m->l);
  tc_release(m->embed);
  tc_release(m->norm);
  tc_release(m->lm_head);
  tc_release(m->rope_cos);
  tc_release(m->rope_sin);
  memset(m, 0, sizeof *m);
}

/* *t replaced by its copy on device. */
static int move_to(tc_tensor **t, const char *device)
{
  tc_tensor *d = tc_to(*t, device);
  if (!d)
    return -1;
  tc_release(*t);
  *t = d;
  return 0;
}

int llama_to(llama_model *m, const char *device)
{
  bool tied = m->lm_head == m->embed;
  for (int l = 0; l < m->c.layers; l++) {
    tc_tensor **w[NPARTS];
    layer_slots(&m->l[l], w);
    for (int p = 0; p < NPARTS; p++)
      if (move_to(w[p], device) < 0)
        return -1;
    if (move_to(&m->l[l].k_cache, device) < 0 ||
        move_to(&m->l[l].v_cache, device) < 0)
      return -1;
  }
  if (move_to(&m->embed, device) < 0 || move_to(&m->norm, device) < 0 ||
      move_to(&m->rope_cos, device) < 0 || move_to(&m->rope_sin, device) < 0)
    return -1;
  if (!tied)
    return move_to(&m->lm_head, device);
  tc_release(m->lm_head);
  m->lm_head = tc_retain(m->embed);
  return 0;
}

int llama_reset_cache(llama_model *m)
{
  for (int l = 0; l < m->c.layers; l++)
    if (tc_fill_(m->l[l].k_cache, 0) < 0 || tc_fill_(m->l[l].v_cache, 0) < 0)
      return -1;
  return 0;
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

/* Hugging Face's rotary embedding: x (heads, hd) rotated by pos, with the
** two halves of each head as the pairs (rotate_half). */
static tc_tensor *rope(const llama_model *m, tc_tensor *x, int pos)
{
  int64_t h2 = m->c.dim / m->c.heads / 2;
  tc_tensor *c = tc_slice(m->rope_cos, 0, pos, pos + 1, 1);
  tc_tensor *s = tc_slice(m->rope_sin, 0, pos, pos + 1, 1);
  tc_tensor *x1 = tc_slice(x, -1, 0, h2, 1), *x2 = tc_slice(x, -1, h2, 2 * h2, 1);
  tc_tensor *halves[] = { tc_sub(tc_mul(x1, c), tc_mul(x2, s)),
                          tc_add(tc_mul(x2, c), tc_mul(x1, s)) };
  return tc_cat(halves, 2, -1);
}

/* Causal attention of q (1, dim) over cache rows [0, pos]. */
static tc_tensor *attention(const llama_model *m, const llama_layer *ly,
                            tc_tensor *q, int pos)
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

tc_tensor *llama_forward(const llama_model *m, int tok, int pos)
{
  const llama_config *c = &m->c;
  tc_tensor *x = tc_slice(m->embed, 0, tok, tok + 1, 1);   /* a view */
  for (int l = 0; l < c->layers; l++) {
    const llama_layer *ly = &m->l[l];
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

int llama_sample(tc_tensor *logits, double temperature, uint64_t *rng,
                 float *probs, int vocab)
{
  if (temperature <= 0) {
    double id;
    if (tc_item(tc_argmax(logits, -1, false), &id) < 0)
      return -1;
    return (int)id;
  }
  tc_tensor *p = tc_softmax(tc_mul_scalar(logits, 1.0 / temperature), -1);
  if (tc_copy_to(p, probs, sizeof *probs * (size_t)vocab) < 0)
    return -1;
  double u = uniform01(rng), acc = 0;
  for (int i = 0; i < vocab; i++)
    if ((acc += probs[i]) > u)
      return i;
  return vocab - 1;
}
