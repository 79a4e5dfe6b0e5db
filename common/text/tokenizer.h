/* tokenizer.h — text <-> token ids, built from a GGUF file's tokenizer.ggml.* metadata.
 *
 * Two tokenizer models are supported (docs/TOKENIZERS.md has the details):
 *
 *   "llama"  SentencePiece-style: the text (spaces replaced by U+2581 "▁", and
 *            with "▁" prepended when add_space_prefix) is split into UTF-8
 *            characters, then the adjacent pair whose concatenation is a NORMAL
 *            token with the highest score is merged, repeatedly (ties: leftmost).
 *            A final piece that is not a token is emitted as its bytes' <0xNN>
 *            BYTE tokens (or UNKNOWN when a byte token is missing).
 *   "gpt2"   byte-level BPE: the text is split by the pre-tokenizer regexes
 *            chosen by tokenizer.ggml.pre (PCRE2, UTF-8 + UCP), each piece is
 *            mapped byte by byte to tokens, and the pair with the lowest merge
 *            rank (tokenizer.ggml.merges order) is merged, repeatedly.
 *
 * Metadata read (everything is validated; any inconsistency refuses the file):
 *
 *   tokenizer.ggml.model             str    "llama" | "gpt2" (others refused)
 *   tokenizer.ggml.pre               str    gpt2 only: pre-tokenizer name
 *   tokenizer.ggml.tokens            [str]  n_vocab token texts (id = index)
 *   tokenizer.ggml.scores            [f32]  optional, n_vocab entries (llama)
 *   tokenizer.ggml.token_type        [int]  optional, n_vocab entries, 0..6
 *   tokenizer.ggml.merges            [str]  gpt2: "left right" per line, by rank
 *   tokenizer.ggml.{bos,eos,eot,eom,unknown}_token_id  int, < n_vocab, or
 *                                           -1 / 0xFFFFFFFF for "none"
 *   tokenizer.ggml.add_bos_token     bool   default: llama true, gpt2 false
 *                                           (llama3 pre: true)
 *   tokenizer.ggml.add_eos_token     bool   default false
 *   tokenizer.ggml.add_space_prefix  bool   llama only, default true
 *
 * Token types (tokenizer.ggml.token_type values):
 *   1 NORMAL, 2 UNKNOWN, 3 CONTROL, 4 USER_DEFINED, 5 UNUSED, 6 BYTE
 *   (0, "undefined", is treated as NORMAL). CONTROL and UNKNOWN token texts
 *   are recognised in input only when parse_special is set; USER_DEFINED
 *   texts always are; a recognised text is never split.
 *
 * Thread safety: a tokenizer_t is read-only after tokenizer_from_gguf(); any
 * number of threads may encode/decode with it at once.
 *
 * Ownership: the tokenizer copies everything it needs from the gguf_t, which
 * may be closed afterwards. tokenizer_free() releases it and NULLs the pointer.
 * Pointers returned by the accessors point into the tokenizer and live until
 * tokenizer_free().
 */
#ifndef PAGODA_TEXT_TOKENIZER_H
#define PAGODA_TEXT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/text/gguf.h"

typedef struct tokenizer tokenizer_t;

enum tokenizer_model {
    TOKENIZER_MODEL_SPM = 1, /* "llama" */
    TOKENIZER_MODEL_BPE = 2, /* "gpt2" */
};

enum tokenizer_token_type {
    TOKENIZER_TOKEN_NORMAL = 1,
    TOKENIZER_TOKEN_UNKNOWN = 2,
    TOKENIZER_TOKEN_CONTROL = 3,
    TOKENIZER_TOKEN_USER_DEFINED = 4,
    TOKENIZER_TOKEN_UNUSED = 5,
    TOKENIZER_TOKEN_BYTE = 6,
};

/* Builds the tokenizer described by g's metadata. Returns NULL and writes a
 * message naming the problem into err (errlen bytes, may be 0) when the
 * metadata is missing, malformed or of an unsupported kind. */
tokenizer_t *tokenizer_from_gguf(const gguf_t *g, char *err, size_t errlen);
void tokenizer_free(tokenizer_t **t);

/* Encodes len bytes of text (need not be NUL-terminated nor valid UTF-8).
 *
 *   add_special    prepend BOS when the metadata says add_bos_token (and
 *                  append EOS when add_eos_token)
 *   parse_special  recognise CONTROL/UNKNOWN token texts such as "<s>",
 *                  "<|eot_id|>", "<|im_start|>" in the text and emit their ids;
 *                  when false those texts are tokenized as plain text
 *
 * Returns the number of tokens n (>= 0). At most max_out ids are written to
 * out; when n > max_out the output is truncated and the caller should retry
 * with a buffer of n entries (n never exceeds 4*len + 4). Returns -1 only
 * when len exceeds TOKENIZER_MAX_TEXT. Invalid UTF-8 never fails: gpt2 maps
 * every byte to a byte-level token, llama emits <0xNN> byte tokens for
 * bytes that are not part of a valid character. */
#define TOKENIZER_MAX_TEXT ((size_t)1 << 24) /* bytes; scratch is ~100 bytes per input byte at worst */
int tokenizer_encode(const tokenizer_t *t, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t *out, int max_out);

/* The bytes one token stands for in output text, into the tokenizer's memory
 * (not NUL-terminated); *len receives their count. NULL and *len = 0 for an
 * id out of range.
 *   NORMAL        llama: text with "▁" -> ' '; gpt2: byte-level chars -> bytes
 *   BYTE          the byte <0xNN> names
 *   USER_DEFINED  the text as stored
 *   CONTROL, UNKNOWN  the text when special is true, else empty
 *   UNUSED        empty
 * No leading-space rule is applied: this is what a streaming detokenizer
 * appends for each generated token (see utf8_complete_len() in common/utf8.h). */
const char *tokenizer_token_piece(const tokenizer_t *t, int32_t id, bool special, size_t *len);

/* Decodes a whole sequence into out (cap bytes; no NUL is added). Returns the
 * number of bytes the full text needs (copy is truncated when larger than
 * cap). For llama vocabularies with add_space_prefix, the single space the
 * encoder put in front of the text is dropped: if the decoded text starts
 * with ' ', that byte is removed (as SentencePiece and llama.cpp do when
 * detokenizing from the start). Ids out of range contribute nothing. */
size_t tokenizer_decode(const tokenizer_t *t, const int32_t *ids, int n, bool special, char *out,
                        size_t cap);

/* Id of the token whose stored text is exactly (text, len) — e.g.
 * "<|eot_id|>", "▁the", "Ġthe" — or -1. */
int32_t tokenizer_find(const tokenizer_t *t, const char *text, size_t len);

/* The token's text as stored in the GGUF (not NUL-terminated), or NULL. */
const char *tokenizer_token_text(const tokenizer_t *t, int32_t id, size_t *len);
/* enum tokenizer_token_type of id, or 0 when out of range. */
int tokenizer_token_type(const tokenizer_t *t, int32_t id);
/* llama: the token's score; gpt2 and out of range: 0. */
float tokenizer_token_score(const tokenizer_t *t, int32_t id);

int32_t tokenizer_n_vocab(const tokenizer_t *t);
enum tokenizer_model tokenizer_model(const tokenizer_t *t);
/* Name of the pre-tokenizer in use: "llama3", "qwen2", "gpt2", "smollm", or
 * "spm" for llama vocabularies. */
const char *tokenizer_pre_name(const tokenizer_t *t);
/* Special ids; -1 when the vocabulary has none. eot is the end-of-turn token
 * of chat models: tokenizer.ggml.eot_token_id, else the first CONTROL token
 * among "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
 * "<EOT>". */
int32_t tokenizer_bos(const tokenizer_t *t);
int32_t tokenizer_eos(const tokenizer_t *t);
int32_t tokenizer_eot(const tokenizer_t *t);
int32_t tokenizer_unk(const tokenizer_t *t);
bool tokenizer_add_bos(const tokenizer_t *t);
/* End of generation: EOS, EOT, EOM, and every CONTROL/USER_DEFINED token whose
 * text is one of the end markers listed above or "<|end_of_text|>",
 * "<|eom_id|>", "</s>". */
bool tokenizer_is_eog(const tokenizer_t *t, int32_t id);


#endif
