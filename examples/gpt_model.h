/*
** gpt_model.h -- a character-level GPT (GPT-2 style: pre-LayerNorm blocks,
** multi-head causal self-attention, a GELU MLP, learned position
** embeddings, the output layer tied to the token embedding) written in
** ordinary tc ops, with its AdamW training step and sampling. Used by
** examples/train_gpt.c and by tc-bench's W13 (one training step).
*/
#ifndef GPT_MODEL_H
#define GPT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <tc.h>

typedef struct {
  int vocab;     /* tokens (distinct bytes of the text) */
  int ctx;       /* context length T */
  int dim;       /* model width C */
  int layers;
  int heads;     /* dim % heads == 0 */
  int batch;     /* windows per training step B */
  double lr, weight_decay;   /* AdamW (betas 0.9, 0.99; eps 1e-8) */
} gpt_config;

typedef struct {
  tc_tensor *ln1_g, *ln1_b, *w_qkv, *b_qkv, *w_proj, *b_proj;
  tc_tensor *ln2_g, *ln2_b, *w_fc, *b_fc, *w_out, *b_out;
} gpt_layer;

typedef struct {
  gpt_config c;
  tc_tensor *wte;          /* [vocab, dim], also the output layer (tied) */
  tc_tensor *wpe;          /* [ctx, dim] */
  tc_tensor *lnf_g, *lnf_b;
  gpt_layer *l;
  tc_tensor **params;      /* every parameter, in a fixed order */
  int nparams;
  tc_tensor *mask;         /* [ctx, ctx] bool, true above the diagonal */
  tc_optimizer *opt;
} gpt_model;

/* Seeded, deterministic GPT-2 init (weights N(0, 0.02), the residual
** projections scaled by 1/sqrt(2 layers), biases 0, LayerNorm gains 1)
** and an AdamW optimizer over every parameter. 0, or -1 with tc's error
** set (or a message in tc_last_error()'s absence: bad config). */
int gpt_init(gpt_model *m, const gpt_config *c, uint64_t seed);
void gpt_free(gpt_model *m);   /* NULL-safe fields; m itself not freed */

/* Logits [B, T, vocab] for token ids idx [B, T] (i64, T <= ctx). */
tc_tensor *gpt_forward(gpt_model *m, tc_tensor *idx);

/* One training step on inputs x and next-token targets y (both [B, T]
** i64): forward, mean cross-entropy, backward, AdamW update. The loss
** before the update goes to *loss. 0, or -1 with tc's error set. */
int gpt_train_step(gpt_model *m, tc_tensor *x, tc_tensor *y, double *loss);

/* B random windows of ctx + 1 tokens from ids[0..n) (n > ctx) drawn with
** the seeded generator *rng: x gets tokens [s, s + ctx), y [s + 1, s + ctx
** + 1), each [batch * ctx] in row-major order. */
void gpt_batch(const uint8_t *ids, size_t n, int batch, int ctx,
               uint64_t *rng, int64_t *x, int64_t *y);

/* Appends n tokens to out[0..nprompt) (the prompt, nprompt >= 1), each
** drawn with tc_multinomial from softmax(logits / temperature) at the last
** position of a fixed [1, ctx] window (the last ctx tokens, zero-padded on
** the right: the mask makes the padding invisible), with grad mode off;
** on a CUDA model the probabilities are copied to the CPU for the draw.
** out has room for nprompt + n. 0, or -1 with tc's error set. */
int gpt_sample(gpt_model *m, int *out, int nprompt, int n,
               double temperature, uint64_t seed);

/* Floating-point operations of one training step (matmuls only: forward
** 2 * m * k * n each, backward twice that). */
double gpt_step_flops(const gpt_config *c);

#endif
