/*
** gpt_model.c -- the character-level GPT of gpt_model.h in ordinary tc
** ops. Everything is written as a user of the eager API writes it; under
** TC_COMPILE=1 the same calls are traced: a training step (forward,
** backward and the AdamW update) is one region, fused and compiled, and its
** losses are bitwise those of the eager run.
*/
#include "gpt_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { PER_LAYER = 12 };

static const double LN_EPS = 1e-5;

/* N(0, std) of the given shape from tc_randn's stream `seed`. */
static tc_tensor *normal(int ndim, const int64_t *shape, double std,
                         uint64_t seed)
{
  tc_tensor *r = tc_randn(TC_F32, ndim, shape, seed);
  tc_tensor *t = tc_mul_scalar(r, std);
  tc_release(r);
  return t;
}

/* Registers t as a parameter (requires grad); NULL-safe (the error stays). */
static tc_tensor *param(gpt_model *m, tc_tensor *t)
{
  m->params[m->nparams++] = t;
  if (t && tc_set_requires_grad(t, true) < 0)
    return NULL;
  return t;
}

int gpt_init(gpt_model *m, const gpt_config *c, uint64_t seed)
{
  memset(m, 0, sizeof *m);
  if (c->vocab < 1 || c->ctx < 1 || c->dim < 1 || c->layers < 1 ||
      c->heads < 1 || c->dim % c->heads || c->batch < 1)
    return -1;
  m->c = *c;
  int64_t V = c->vocab, T = c->ctx, C = c->dim;
  m->l = calloc((size_t)c->layers, sizeof *m->l);
  m->params = calloc((size_t)(4 + PER_LAYER * c->layers), sizeof *m->params);
  if (!m->l || !m->params)
    return -1;
  uint64_t s = seed * 1000;   /* one tc_randn stream per weight */
  double proj_std = 0.02 / sqrt(2.0 * c->layers);
  bool ok = true;
  ok &= (m->wte = param(m, normal(TC_SHAPE(V, C), 0.02, s++))) != NULL;
  ok &= (m->wpe = param(m, normal(TC_SHAPE(T, C), 0.01, s++))) != NULL;
  for (int i = 0; i < c->layers; i++) {
    gpt_layer *ly = &m->l[i];
    ok &= (ly->ln1_g = param(m, tc_ones(TC_F32, TC_SHAPE(C)))) != NULL;
    ok &= (ly->ln1_b = param(m, tc_zeros(TC_F32, TC_SHAPE(C)))) != NULL;
    ok &= (ly->w_qkv = param(m, normal(TC_SHAPE(C, 3 * C), 0.02, s++))) != NULL;
    ok &= (ly->b_qkv = param(m, tc_zeros(TC_F32, TC_SHAPE(3 * C)))) != NULL;
    ok &= (ly->w_proj = param(m, normal(TC_SHAPE(C, C), proj_std, s++))) != NULL;
    ok &= (ly->b_proj = param(m, tc_zeros(TC_F32, TC_SHAPE(C)))) != NULL;
    ok &= (ly->ln2_g = param(m, tc_ones(TC_F32, TC_SHAPE(C)))) != NULL;
    ok &= (ly->ln2_b = param(m, tc_zeros(TC_F32, TC_SHAPE(C)))) != NULL;
    ok &= (ly->w_fc = param(m, normal(TC_SHAPE(C, 4 * C), 0.02, s++))) != NULL;
    ok &= (ly->b_fc = param(m, tc_zeros(TC_F32, TC_SHAPE(4 * C)))) != NULL;
    ok &= (ly->w_out = param(m, normal(TC_SHAPE(4 * C, C), proj_std, s++))) != NULL;
    ok &= (ly->b_out = param(m, tc_zeros(TC_F32, TC_SHAPE(C)))) != NULL;
  }
  ok &= (m->lnf_g = param(m, tc_ones(TC_F32, TC_SHAPE(C)))) != NULL;
  ok &= (m->lnf_b = param(m, tc_zeros(TC_F32, TC_SHAPE(C)))) != NULL;
  if (!ok)
    return -1;
  /* The causal mask: position i may not see j > i. */
  tc_tensor *ones = tc_ones(TC_F32, TC_SHAPE(T, T));
  tc_tensor *upper = tc_triu(ones, 1);
  m->mask = tc_ne_scalar(upper, 0);
  tc_release(upper);
  tc_release(ones);
  if (!m->mask)
    return -1;
  m->opt = tc_adamw(m->params, m->nparams, c->lr, 0.9, 0.99, 1e-8,
                    c->weight_decay);
  return m->opt ? 0 : -1;
}

void gpt_free(gpt_model *m)
{
  tc_optimizer_free(m->opt);
  for (int i = 0; i < m->nparams; i++)
    tc_release(m->params[i]);
  tc_release(m->mask);
  free(m->params);
  free(m->l);
  memset(m, 0, sizeof *m);
}

static tc_tensor *linear(tc_tensor *x, tc_tensor *w, tc_tensor *b)
{
  return tc_add(tc_matmul(x, w), b);
}

/* Multi-head causal self-attention of h [B, T, C]. */
static tc_tensor *attention(gpt_model *m, const gpt_layer *ly, tc_tensor *h,
                            int64_t B, int64_t T)
{
  int64_t C = m->c.dim, H = m->c.heads, hd = C / H;
  tc_tensor *qkv[3];
  if (tc_chunk(linear(h, ly->w_qkv, ly->b_qkv), 3, -1, qkv) != 3)
    return NULL;
  for (int i = 0; i < 3; i++)   /* [B, T, C] -> [B, H, T, hd] */
    qkv[i] = tc_transpose(tc_reshape(qkv[i], TC_SHAPE(B, T, H, hd)), 1, 2);
  tc_tensor *att = tc_mul_scalar(tc_matmul(qkv[0], tc_transpose(qkv[1], 2, 3)),
                                 1.0 / sqrt((double)hd));
  tc_tensor *mask = tc_slice(tc_slice(m->mask, 0, 0, T, 1), 1, 0, T, 1);
  att = tc_softmax(tc_masked_fill(att, mask, -INFINITY), -1);
  tc_tensor *y = tc_transpose(tc_matmul(att, qkv[2]), 1, 2);   /* [B, T, H, hd] */
  return linear(tc_reshape(y, TC_SHAPE(B, T, C)), ly->w_proj, ly->b_proj);
}

tc_tensor *gpt_forward(gpt_model *m, tc_tensor *idx)
{
  if (tc_ndim(idx) != 2)
    return NULL;
  int64_t B = tc_size(idx, 0), T = tc_size(idx, 1);
  tc_tensor *x = tc_add(tc_embedding(m->wte, idx),
                        tc_slice(m->wpe, 0, 0, T, 1));
  for (int i = 0; i < m->c.layers; i++) {
    const gpt_layer *ly = &m->l[i];
    tc_tensor *h = tc_layer_norm(x, ly->ln1_g, ly->ln1_b, LN_EPS);
    x = tc_add(x, attention(m, ly, h, B, T));
    h = tc_layer_norm(x, ly->ln2_g, ly->ln2_b, LN_EPS);
    tc_tensor *ff = tc_gelu(linear(h, ly->w_fc, ly->b_fc));
    x = tc_add(x, linear(ff, ly->w_out, ly->b_out));
  }
  x = tc_layer_norm(x, m->lnf_g, m->lnf_b, LN_EPS);
  return tc_matmul(x, tc_transpose(m->wte, 0, 1));   /* tied output layer */
}

int gpt_train_step(gpt_model *m, tc_tensor *x, tc_tensor *y, double *loss)
{
  size_t mark = tc_scope_begin();
  int rc = -1;
  if (tc_optimizer_zero_grad(m->opt) == 0) {
    tc_tensor *logits = gpt_forward(m, x);
    tc_tensor *l = tc_cross_entropy(
        tc_reshape(logits, TC_SHAPE(-1, m->c.vocab)),
        tc_reshape(y, TC_SHAPE(-1)));
    if (l && tc_backward(l) == 0 && tc_optimizer_step(m->opt) == 0 &&
        tc_item(l, loss) == 0)
      rc = 0;
  }
  tc_scope_end(mark);
  return rc;
}

static uint64_t splitmix64(uint64_t *s)
{
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void gpt_batch(const uint8_t *ids, size_t n, int batch, int ctx,
               uint64_t *rng, int64_t *x, int64_t *y)
{
  for (int b = 0; b < batch; b++) {
    size_t s = (size_t)(splitmix64(rng) % (n - (size_t)ctx));
    for (int t = 0; t < ctx; t++) {
      x[(size_t)b * ctx + t] = ids[s + t];
      y[(size_t)b * ctx + t] = ids[s + t + 1];
    }
  }
}

int gpt_sample(gpt_model *m, int *out, int nprompt, int n,
               double temperature, uint64_t seed)
{
  int T = m->c.ctx, V = m->c.vocab;
  int64_t *win = malloc(sizeof *win * (size_t)T);
  int64_t *draw = malloc(sizeof *draw * (size_t)T);
  if (!win || !draw) {
    free(win);
    free(draw);
    return -1;
  }
  bool grad = tc_set_grad_enabled(false);
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    int len = nprompt + i, start = len > T ? len - T : 0, cnt = len - start;
    for (int j = 0; j < T; j++)
      win[j] = j < cnt ? out[start + j] : 0;
    size_t mark = tc_scope_begin();
    tc_tensor *idx = tc_from_data(TC_I64, TC_SHAPE(1, T), win,
                                  sizeof *win * (size_t)T);
    tc_tensor *logits = tc_reshape(gpt_forward(m, idx), TC_SHAPE(T, V));
    tc_tensor *probs = tc_softmax(tc_mul_scalar(logits, 1.0 / temperature), -1);
    /* one draw per window position; the one after the last real token */
    if (tc_copy_to(tc_multinomial(probs, 1, true, seed + (uint64_t)i), draw,
                   sizeof *draw * (size_t)T) < 0)
      rc = -1;
    else
      out[len] = (int)draw[cnt - 1];
    tc_scope_end(mark);
  }
  tc_set_grad_enabled(grad);
  free(win);
  free(draw);
  return rc;
}

double gpt_step_flops(const gpt_config *c)
{
  double B = c->batch, T = c->ctx, C = c->dim, V = c->vocab;
  double per_layer = 2 * B * T * (C * 3 * C + C * C + 2 * C * 4 * C) +
                     2 * 2 * B * T * T * C;   /* q @ k^T and att @ v */
  double forward = c->layers * per_layer + 2 * B * T * C * V;
  return 3 * forward;
}
