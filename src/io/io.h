/*
** io.h -- tensors in and out of the process: printing (format.c), the
** safetensors file format (safetensors.c) and the small strict JSON reader
** its header needs (json.c). Builds on eager (realization, conversions)
** and tensor; nothing below includes it.
*/
#ifndef TC_IO_H
#define TC_IO_H

#include "../eager/eager.h"

/* -- JSON (json.c): just what a safetensors header holds ------------------- */

/* A parsed value. Numbers are non-negative integers only (the header has
** no others); strings are NUL-free UTF-8, NUL-terminated. */
typedef enum { JSON_OBJECT, JSON_ARRAY, JSON_STRING, JSON_UINT } json_kind;

typedef struct json_value {
  json_kind kind;
  uint64_t num;                 /* JSON_UINT */
  char *str;                    /* JSON_STRING: owned */
  int n;                        /* members (object) or elements (array) */
  char **keys;                  /* object: owned, n of them */
  struct json_value *items;     /* owned, n of them */
} json_value;

/* Parse text[0, len) as one JSON value followed by nothing but whitespace.
** Depth (16), array length (64) and the number of values (2^20) are
** bounded. 0, or -1 with a message in err
** ("at byte N: what"). */
int io_json_parse(const char *text, size_t len, json_value *out, char *err,
                  size_t errlen);
void io_json_free(json_value *v);
/* The member of object o named key, or NULL. */
const json_value *io_json_get(const json_value *o, const char *key);
/* Is s[0, n) valid UTF-8 (no overlongs, no surrogates)? */
bool io_utf8_valid(const char *s, size_t n);

#endif
