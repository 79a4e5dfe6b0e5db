/* mklora.h — pagoda-mkmodel's adapter mode: a random LoRA adapter for a
 * given base file, written as llama.cpp's convert_lora_to_gguf.py writes
 * one (layout in worker/model/lora.h).
 *
 *   pagoda-mkmodel --lora-for BASE.gguf -o OUT.gguf [--lora-rank 8]
 *       [--lora-alpha A (default: the rank, so alpha / r = 1)]
 *       [--lora-targets attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down]
 *       [--type F32|F16|BF16|Q8_0] [--seed S] [--lora-std 0.5]
 *
 * For every layer and every target T the base has (blk.L.T.weight, [in,
 * out]): blk.L.T.weight.lora_a [in, r] with entries uniform of standard
 * deviation 1/sqrt(in), and .lora_b [r, out] of deviation std/sqrt(r), so
 * (x·Aᵀ)·Bᵀ of a unit-variance x has deviation about `std` — an update the
 * size of `std` times the base's own output (the base's weights are
 * N(0, 1/in)). A target the base lacks is an error naming it. A factor
 * whose row length is not a multiple of the type's block (Q8_0: B of rank
 * below 32) is written in F32. Same arguments, same bytes.
 */
#ifndef PAGODA_WORKER_MKLORA_H
#define PAGODA_WORKER_MKLORA_H

/* True when argv asks for an adapter (has --lora-for). */
int mklora_wanted(int argc, char **argv);

/* Runs the adapter mode: 0 written, 1 failed (message on stderr), 2 bad
 * arguments. */
int mklora_main(int argc, char **argv);

#endif
