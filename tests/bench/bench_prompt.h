/* bench_prompt.h — synthetic prompts of a chosen length for pagoda-bench.
 *
 * A prompt is n_words words from a fixed list of 120 common English words,
 * separated by single spaces. Each word (with its leading space) is one token
 * for the llama-2 (SentencePiece) and llama-3 (BPE) tokenizers, so n_words
 * words are ~n_words prompt tokens (+1 for BOS); the server's
 * usage.prompt_tokens gives the real count.
 *
 * Words are drawn with a deterministic generator (splitmix64) from
 * (seed, request index):
 *   - default: every word depends on the request index, so two requests share
 *     no prefix and a prefix cache cannot help;
 *   - shared_prefix: the first n_words - BENCH_PROMPT_TAIL words depend on the
 *     seed only (identical across requests); only the last
 *     min(n_words, BENCH_PROMPT_TAIL) words vary per request.
 *
 * Ownership: bench_prompt_make() returns a malloc'd string the caller frees.
 */
#ifndef PAGODA_BENCH_PROMPT_H
#define PAGODA_BENCH_PROMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { BENCH_PROMPT_TAIL = 8 };

char *bench_prompt_make(size_t n_words, uint64_t seed, uint64_t i_request, bool shared_prefix);

/* Multi-turn / shared-prefix workload (pagoda-bench --groups G [--turns T]):
 * G long "system prompts" of prefix_words words each, every one used by a
 * stream of conversations of T turns. Request i belongs to slot s = i mod G,
 * at turn t = (i / G) mod T of conversation c = s + G * (i / (G * T)); its
 * prompt is
 *     system(s) + [user(c, k) + reply(c, k) for k < t] + user(c, t)
 * with user() BENCH_PROMPT_TAIL words and reply() turn_words words, all
 * deterministic in (seed, ids). So turn t's prompt extends turn t-1's (the
 * history grows like a chat's; the reply stands in for the model's answer),
 * and conversations of one slot share the system prompt. T = 1: G groups of
 * requests sharing a long prefix, each with its own tail. Consecutive
 * requests visit the G slots in turn, so with G ≥ concurrency a
 * conversation's next turn is sent after its previous one started. */
char *bench_prompt_conversation(size_t prefix_words, uint64_t seed, uint64_t i_request,
                                size_t groups, size_t turns, size_t turn_words);

/* splitmix64 step: advances *state and returns 64 random bits. */
uint64_t bench_prompt_rand(uint64_t *state);

#endif
