/*
** llama_model.h -- a Llama-architecture model written in ordinary tc ops
** (RMSNorm, RoPE, causal multi-head attention over a KV cache, SwiGLU),
** shared by the llama example (examples/llama.c) and tc-bench's W12.
**
** Weights use Hugging Face's Llama names (the layout of the public
** stories15M / stories110M checkpoints). A model comes from a safetensors
** file (llama_load) or from random weights made in memory (llama_init,
** normal with std 0.02, norms 1), which llama_save writes as such a file.
**
** Functions return 0 / a new tensor, or -1 / NULL with a message: tc's own
** in tc_last_error(), others printed to stderr.
*/
#ifndef LLAMA_MODEL_H
#define LLAMA_MODEL_H

#include <stdint.h>

#include <tc.h>

typedef struct {
  int dim, hidden, layers, heads, vocab, seq_len;
  double eps, theta;
} llama_config;

typedef struct {
  tc_tensor *attn_norm, *wq, *wk, *wv, *wo;
  tc_tensor *ffn_norm, *w_gate, *w_up, *w_down;
  tc_tensor *k_cache, *v_cache;     /* [seq_len, dim] each */
} llama_layer;

typedef struct {
  llama_config c;
  tc_tensor *embed, *norm, *lm_head;   /* lm_head may be embed (tied) */
  tc_tensor *rope_cos, *rope_sin;      /* [seq_len, head_dim / 2] */
  llama_layer *l;
} llama_model;

/* The shapes of a named preset: stories15M, stories110M or tiny. */
int llama_preset(const char *name, llama_config *c);
/* Random weights of config c (seeded), KV caches zeroed, in memory. */
int llama_init(llama_model *m, const llama_config *c, uint64_t seed);
/* m's weights as a safetensors checkpoint with the config as metadata. */
int llama_save(const llama_model *m, const char *path);
/* A checkpoint mapped from path (the tensors keep the mapping). */
int llama_load(llama_model *m, const char *path);
void llama_free(llama_model *m);
/* Every tensor of m (weights, KV caches, RoPE tables) moved to device
** ("cuda" or "cpu"); a tied lm_head stays tied. */
int llama_to(llama_model *m, const char *device);

/* Logits (1, vocab) for token tok at position pos (0 <= pos < seq_len);
** writes row pos of every layer's KV cache. Call it in a scope: its
** temporaries are the scope's. */
tc_tensor *llama_forward(const llama_model *m, int tok, int pos);
/* Zeroes the KV caches (a new sequence). */
int llama_reset_cache(llama_model *m);

/* The next token from logits: argmax when temperature <= 0, else a draw
** from softmax(logits / temperature) with the xorshift state rng; probs
** holds vocab floats of scratch. -1 on an error. */
int llama_sample(tc_tensor *logits, double temperature, uint64_t *rng,
                 float *probs, int vocab);

#endif
