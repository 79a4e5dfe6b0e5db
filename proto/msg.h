/* msg.h — the gateway⇄worker wire protocol: constants, message structs,
 * encoder, decoder and ZeroMQ send/receive helpers (bodies in msg.c; the
 * frames around them and ZeroMQ in msg_frame.c).
 *
 * Transport
 * ---------
 * The gateway binds a ZeroMQ ROUTER socket; every worker connects a DEALER
 * socket to it (so workers on other hosts only need the gateway's address).
 * One protocol message is one ZeroMQ multipart message:
 *
 *   frame 0  routing identity   only on the gateway's ROUTER side, added and
 *                               stripped by ZeroMQ/proto_send/proto_recv
 *   frame 1  protocol tag       6 bytes "PGDA01": "PGDA" + 2 ASCII digits of
 *                               PROTO_VERSION. Any other tag → PROTO_ETAG;
 *                               "PGDAxx" with another version → PROTO_EVERSION.
 *   frame 2  message type       1 byte, enum proto_type below
 *   frame 3  body               one msgpack map (≤ PROTO_MAX_BODY bytes) with
 *                               short string keys, table below. DRAIN and
 *                               SHUTDOWN carry an empty map.
 *
 * Body rules (the decoder enforces all of them; anything else is malformed):
 *   - the body is exactly one msgpack map, no trailing bytes;
 *   - keys are msgpack strings; unknown keys are skipped (forward
 *     compatibility: a newer peer may add fields); a key given twice is an error;
 *   - "required" keys must be present; optional keys take the default listed;
 *   - integers may use any msgpack int encoding but must fit the range listed;
 *     floats may be float32, float64 or an integer, must be finite and in range;
 *   - strings must be valid UTF-8 without NUL bytes (they are exposed as C
 *     strings) and within the byte limit listed; "bin" fields are raw bytes;
 *   - array/map counts are checked against their limit before any allocation,
 *     and nesting of skipped unknown values is limited to PROTO_MAX_DEPTH.
 *
 * Messages (direction, key: type — meaning)
 * -----------------------------------------
 * REGISTER  (worker → gateway) first message after (re)connecting.
 *   v          uint  req  protocol version the worker speaks, = PROTO_VERSION
 *   model      str   req  served model name, 1..PROTO_MAX_NAME bytes
 *   replica    str   req  replica id, unique per worker process ("host:pid:random"),
 *                         1..PROTO_MAX_NAME bytes; a second REGISTER with the same
 *                         replica id from a new connection replaces the old entry
 *   host       str   req  host name, ≤ PROTO_MAX_NAME bytes
 *   pid        uint  req  worker process id, 1..2^31-1
 *   cap        uint  req  capacity: max concurrent sequences, 1..PROTO_MAX_CAPACITY
 *   n_ctx      uint  req  context length in tokens, 1..PROTO_MAX_TOKENS
 *   n_vocab    uint  req  vocabulary size, 0..PROTO_MAX_TOKENS (0 = not known yet)
 *   kv_blocks  uint  req  KV blocks in the pool, 0..2^31-1
 *   block      uint  req  tokens per KV block, 1..PROTO_MAX_BLOCK
 *   hb_ms      uint  opt  the worker's heartbeat interval in ms, default
 *                         PROTO_HEARTBEAT_MS, PROTO_MIN_HEARTBEAT_MS..PROTO_MAX_HEARTBEAT_MS
 *   vis        map   opt  the model reads images (a vision encoder is loaded); absent =
 *                         text only, and the gateway refuses image parts. Keys required but
 *                         preproc:
 *     size       uint   encoder input side in pixels, 1..PROTO_MAX_VIS_SIZE (the gateway
 *                       fits every image to size × size)
 *     n_tok      uint   embeddings per image, 1..PROTO_MAX_VIS_TOKENS
 *     proj       str    projector type as llama.cpp's mmproj names it ("gemma3"),
 *                       1..PROTO_MAX_VIS_PROJ bytes
 *     preproc    uint   opt, a projector with tiles (idefics3): the picture's longest
 *                       side before it is cut into size × size tiles
 *                       (clip.vision.preproc_image_size), 0..PROTO_MAX_VIS_PREPROC;
 *                       absent or 0 = no tiles (a worker before this field)
 *   lora       array opt  the LoRA adapters the worker has loaded (SUBMIT `lora` may name
 *                         them), 1..PROTO_MAX_REG_LORA maps, all keys required; absent =
 *                         none. The gateway sends a request naming an adapter only to
 *                         replicas that list it with the hash it expects (remote workers
 *                         may have been started with another set):
 *     name       str    the adapter's name (--lora NAME=FILE), 1..PROTO_MAX_NAME bytes
 *     hash       uint   content hash of its GGUF file (prefix_key_bytes, u64): with the
 *                       scale it keys the request's KV blocks (prefix_key_adapters),
 *                       so the gateway's routing keys match the worker's
 *     rank       uint   its largest rank, 1..PROTO_MAX_LORA_RANK
 *     scale      float  its default scale (--lora NAME=FILE:SCALE), [-100, 100]
 *
 * HEARTBEAT (both ways) every hb_ms while connected.
 *   seq        uint  req  sender's counter, +1 per heartbeat (u64)
 *   hb_ms      uint  opt  sender's heartbeat interval (same range as above),
 *                         0/absent = unknown; the receiver declares the sender
 *                         dead after PROTO_LIVENESS intervals without any message
 *   load       map   opt  worker → gateway only; all keys required when present:
 *     run        uint   sequences running (decoding or prefilling)
 *     wait       uint   sequences admitted but waiting for KV blocks
 *     kv_used    uint   KV blocks in use by sequences
 *     kv_total   uint   KV blocks in the pool
 *     pc_q       uint   prompt tokens looked up in the prefix cache since start (u64)
 *     pc_hit     uint   of those, tokens found cached (u64); both in tokens, like
 *                       vLLM's prefix_cache_{queries,hits}_total
 *     preempt    uint   preemptions since start (u64)
 *     gen_tok    uint   completion tokens generated since start (u64)
 *     prompt_tok uint   prompt tokens processed since start (u64)
 *     free       uint   credit: SUBMITs the worker accepts right now
 *     sd_n, sd_dt, sd_acc  uint  optional (absent = 0): speculative decoding since
 *                       start (u64): verifies with drafts, draft tokens, accepted ones
 *     stopped    uint   optional (absent = 0): scheduler steps stopped for a better
 *                       tier since start (u64; docs/BATCHING.md, "Preemption at a
 *                       layer boundary")
 *   (u32 fields: 0..2^31-1)
 *   prog       map   opt  worker → gateway only: step progress, for hang detection
 *                         by progress rather than by heartbeats (a step may take
 *                         longer than many heartbeat intervals); all keys required
 *                         when present:
 *     steps      uint   scheduler steps completed since start (u64)
 *     busy       bool   the worker holds requests (running or waiting), so it
 *                       should be completing steps
 *     stall_ms   uint   ms since the worker last made progress — a step
 *                       completed, or inside a step a layer of the forward
 *                       pass did — or since it became busy, whichever is
 *                       later; 0 when not busy (0..2^31-1). Relative, so the
 *                       hosts need no common clock.
 *     slow_ms    uint   the slowest of the last PROTO_PROGRESS_WINDOW steps, ms
 *                       (0 = none yet; 0..2^31-1)
 *   The gateway judges a busy worker hung when stall_ms (plus the time since
 *   that heartbeat) passes max(--progress-timeout-ms, PROTO_PROGRESS_SCALE ×
 *   slow_ms).
 *
 * SUBMIT (gateway → worker) one generation request.
 *   id         uint  req  request id assigned by the gateway, ≥ 1 (u64)
 *   prio       uint  req  0 high, 1 normal, 2 low (also the preemption order)
 *   kind       str   req  "chat" (uses msgs) or "completion" (uses prompt or
 *                         prompt_ids, exactly one of them)
 *   msgs       array opt  ≤ PROTO_MAX_MESSAGES maps {role: str ≤ PROTO_MAX_ROLE,
 *                         content: str ≤ PROTO_MAX_PROMPT, tool_calls: str opt
 *                         (assistant turns: the calls as a JSON array
 *                         [{"id","type":"function","function":{"name",
 *                         "arguments": object}}], 2..PROTO_MAX_PROMPT bytes),
 *                         tool_call_id: str opt ≤ PROTO_MAX_NAME (tool turns),
 *                         parts: array opt (a message with images, chat only: its
 *                         text and images in order, ≤ PROTO_MAX_PARTS elements,
 *                         each a str ≤ PROTO_MAX_PROMPT or a uint, an index into
 *                         imgs < n_imgs; absent = content alone is the message)};
 *                         required, ≥ 1, for chat
 *   imgs       array opt  chat only: the request's decoded images, ≤ PROTO_MAX_IMAGES
 *                         maps {w: uint, h: uint (1..PROTO_MAX_VIS_SIZE), rgb: bin
 *                         of exactly w·h·3 bytes (RGB8, top row first), hash: bin
 *                         of 32 bytes (BLAKE2b-256, common/image/image.h), nx, ny:
 *                         uint opt, both or neither, 1..PROTO_MAX_TILES with
 *                         nx·ny ≤ PROTO_MAX_TILES: this image is the first tile of
 *                         a picture cut into an nx × ny grid, whose other tiles
 *                         (row-major) and then its global image are the next
 *                         nx·ny images (all of them < n_imgs; docs/VISION.md
 *                         "Idefics3")}; a message's part names a picture by its
 *                         first image. Absent when there are none.
 *   tools      str   opt  chat only: the tools the template announces, a JSON
 *                         array of OpenAI tool objects {"type":"function",
 *                         "function":{"name","description"?,"parameters"?}},
 *                         2..PROTO_MAX_PROMPT bytes (the gateway validated it)
 *   tool_choice str  opt  with tools: "auto" (default), "required" (at least
 *                         one call) or "function:NAME" (a call of NAME); the
 *                         worker enforces the last two with a grammar.
 *                         ≤ PROTO_MAX_NAME bytes
 *   par_tools  bool  opt  more than one call per answer allowed, default true
 *   think      bool  opt  chat only: chat_template_kwargs.enable_thinking
 *                         (absent = not given; templates that do not read it
 *                         ignore it)
 *   prompt     str   opt  ≤ PROTO_MAX_PROMPT bytes
 *   prompt_ids array opt  token ids (uint ≤ PROTO_MAX_TOKEN_ID), ≤ PROTO_MAX_TOKENS;
 *                         used instead of prompt, e.g. by pagoda-bench
 *   (knobs)    float/uint opt  the sampling knobs (temp, top_p, ...): a key
 *                         per row of PROTO_SAMPLING_KNOBS (proto/sampling.h),
 *                         which gives its type, default and wire range;
 *                         always sent, in table order
 *   seed       uint  opt  sampler seed (u64); absent = worker picks one
 *   bias       map   opt  logit bias {token id (uint): bias (float, [-100, 100])},
 *                         ≤ PROTO_MAX_LOGIT_BIAS entries
 *   logprobs   bool  opt  return the chosen token's logprob, default false
 *   top_lp     uint  opt  top alternatives per token, 0..PROTO_MAX_TOP_LOGPROBS
 *                         (requires logprobs when > 0), default 0
 *   max_tok    uint  opt  completion token limit, 0 = until the context is full
 *   stop       array opt  ≤ PROTO_MAX_STOP strings, each 1..PROTO_MAX_STOP_LEN bytes
 *   ignore_eos bool  opt  keep generating past end-of-sequence, default false
 *   no_spec    bool  opt  no speculative decoding for this request, default false
 *   deadline_ms uint opt  a no-progress deadline: give up (finish "timeout")
 *                         when this many ms pass after the worker receives the
 *                         SUBMIT, or after the last step that computed rows of
 *                         the request (a prefill chunk or a token), without
 *                         another; 0 = none. Relative, so gateway and worker
 *                         hosts need not share a clock. (A worker that reads it
 *                         as a plain deadline from receipt ends long prompts
 *                         sooner, nothing worse.)
 *   stream     bool  opt  the client streams; when false the worker may send
 *                         fewer, larger EVENTs. Default false.
 *   resume     array opt  completion token ids a previous replica already sent
 *                         to the client (re-dispatch after a worker crash):
 *                         the worker appends them to the prompt, does not send
 *                         them again, and continues after them. ≤ PROTO_MAX_TOKENS.
 *   grammar    str   opt  GBNF text (common/grammar/gbnf.h) the output must match
 *                         (response_format json_object / json_schema compiled by
 *                         the gateway, or the request's own grammar);
 *                         ≤ PROTO_MAX_GRAMMAR bytes. The worker parses it again
 *                         and answers ERROR 400 when it is not a valid grammar.
 *   n_choices  uint  opt  completions to generate from the prompt, 1..PROTO_MAX_CHOICES,
 *                         default 1. The worker prefills the prompt once and shares
 *                         its KV blocks; choice i samples with seed + i. Its EVENTs
 *                         carry `choice`; each choice ends with its own finish EVENT
 *                         (the request is over when all have). > 1 excludes `resume`.
 *   op         str   opt  "tokenize" | "detokenize"; absent = generate. Tokenize:
 *                         the worker renders/tokenizes the prompt and answers with
 *                         EVENTs whose `ids` are the prompt's tokens (≤
 *                         PROTO_MAX_EVENT_IDS each, `n` counting them), the last
 *                         with finish "stop" and usage.prompt = the count.
 *                         Detokenize (completion kind with prompt_ids only): EVENTs
 *                         whose `text` is the ids' text (valid UTF-8, U+FFFD for
 *                         broken sequences), finish "stop". Either: n_choices 1, no
 *                         resume, nothing is generated or sampled.
 *   add_special bool opt  tokenize a text prompt with the tokenizer's BOS rule
 *                         (default true); false = no BOS
 *                         op "embed" (POST /v1/embeddings): kind "completion",
 *                         no prompt/prompt_ids; `inputs` instead, n_choices =
 *                         the number of inputs. Each input is a prefill-only
 *                         sequence (nothing sampled); the worker answers one
 *                         EVENT per input (choice = its index) with `emb`,
 *                         finish "stop" and usage.prompt = its token count.
 *                         op "rank" (POST /v1/rerank, /v1/score): kind
 *                         "completion", `prompt` = the query, `inputs` = the
 *                         documents (n_choices = their number). The worker
 *                         builds each (query, document) prompt with the model's
 *                         rerank template and answers one EVENT per document
 *                         (choice = its index) whose `emb` holds the rank head's
 *                         outputs (emb[0] = the relevance score), finish "stop",
 *                         usage.prompt = its token count; ERROR 400 for a model
 *                         without a rank head.
 *   inputs     array opt  op embed and rank only (and required there): 1..PROTO_MAX_CHOICES
 *                         maps {t: str ≤ PROTO_MAX_PROMPT (text, tokenized with
 *                         the BOS rule)} or {ids: array of token ids, 1..
 *                         PROTO_MAX_TOKENS}, exactly one of the two keys
 *   dims       uint  opt  op embed: the client's `dimensions`, 1..PROTO_MAX_EMBED_DIM;
 *                         the worker answers ERROR 400 unless it equals the model's
 *                         embedding size
 *   part       uint  opt  prefix-cache partition (u64), default 0 = the public
 *                         partition (no keys, no cache_salt). The gateway derives
 *                         it from the API key (and cache_salt), never from the
 *                         client alone (gateway/partition.h); the worker seeds
 *                         the request's block-key chain with it
 *                         (common/prefix_key.h), so blocks are only reused within
 *                         one partition. Encoded only when non-zero. A worker
 *                         that predates the key skips it and shares its cache
 *                         across partitions: run workers at least as new as
 *                         the gateway when keys are on.
 *   lora       array opt  LoRA adapters the request runs with, in order, 1..
 *                         PROTO_MAX_LORA maps {name: str 1..PROTO_MAX_NAME (req),
 *                         scale: float [-100, 100] (opt, default: the worker's
 *                         scale of that adapter, --lora NAME=FILE:SCALE)}; absent =
 *                         the base model. The worker answers ERROR 400 (err
 *                         bad_request) for a name it has not loaded. Encoded
 *                         only when non-empty.
 *
 * CANCEL (gateway → worker) stop a request; the worker answers with a final
 *   EVENT (finish "cancelled") unless the request had already finished.
 *   id         uint  req  request id, ≥ 1
 *
 * EVENT (worker → gateway) progress of one request; the last one has finish.
 *   id         uint  req  request id, ≥ 1
 *   text       str   opt  text delta, valid UTF-8 (the worker holds back partial
 *                         characters), ≤ PROTO_MAX_TEXT bytes, default ""
 *   ids        array opt  token ids of this delta, ≤ PROTO_MAX_EVENT_IDS
 *   n          uint  req  completion tokens so far, resumed ones included
 *   n_resumed  uint  opt  echo of the SUBMIT's resume count, so the gateway can
 *                         check the worker continued after them; default 0
 *   choice     uint  opt  which of the SUBMIT's n_choices this EVENT is about,
 *                         0..PROTO_MAX_CHOICES-1, default 0; `n`, `usage.completion`
 *                         count that choice's tokens only
 *   lp         array opt  one entry per id (count must equal ids' count):
 *                         {b: bin ≤ PROTO_MAX_TOKEN_BYTES (the token's bytes, may be
 *                         a partial UTF-8 sequence), lp: float ≤ 0 (log-prob),
 *                         top: array opt ≤ PROTO_MAX_TOP_LOGPROBS of {b, lp}}
 *   finish     str   opt  "stop" | "length" | "cancelled" | "error" | "timeout";
 *                         absent = not finished
 *   stop       uint  opt  with finish "stop" when a stop string ended the choice:
 *                         1 + its index in the SUBMIT's `stop`, 1..PROTO_MAX_STOP;
 *                         absent = EOS / end of grammar (the Anthropic API reports
 *                         which stop sequence matched)
 *   usage      map   opt  required with finish: {prompt: uint, cached: uint
 *                         (prompt tokens served from the prefix cache),
 *                         completion: uint}
 *   err        uint  opt  with finish "error" / "timeout": why, a proto_err_t
 *                         (table below), 0..PROTO_MAX_ERR; default 0 = unspecified
 *   emb        bin   opt  op embed, with finish "stop": the input's embedding as
 *                         little-endian float32, 4..4·PROTO_MAX_EMBED_DIM bytes
 *                         (a multiple of 4): pooled final-norm hidden state,
 *                         L2-normalised
 *
 * ERROR (both ways) something failed.
 *   id         uint  req  request id, 0 = not about one request
 *   code       uint  req  HTTP-like status 100..599: 400 bad request, 413 too
 *                         long for the context, 500 internal, 503 not accepting
 *                         (draining, no credit), 409 (gateway → worker, id 0):
 *                         "you are not registered — send REGISTER again"
 *   msg        str   req  human-readable, ≤ PROTO_MAX_ERROR_MSG bytes
 *   err        uint  opt  the typed cause, a proto_err_t (table below),
 *                         0..PROTO_MAX_ERR; default 0 = unspecified (a peer
 *                         that predates the key: go by `code`). Senders set
 *                         `code` = proto_err_code(err) so older peers agree.
 *
 * Error causes (ERROR err, EVENT err): wire constants, never renumber.
 *   err  name             code  meaning
 *   0    unspecified      any   not given (older peer): go by ERROR code
 *   1    bad_request      400   invalid request: prompt, template roles, token ids,
 *                               sampling parameters, stop strings, resume
 *   2    context_length   413   prompt (+ resumed tokens) + 1 > the context
 *   3    duplicate_id     400   the id is live on this worker already
 *   4    unavailable      503   not accepting now (draining)
 *   5    deadline         504   deadline_ms passed (EVENT finish "timeout")
 *   6    engine           500   the forward pass failed (EVENT finish "error")
 *   7    not_registered   409   gateway → worker, id 0: send REGISTER again
 * A receiver treats an err it does not know (a newer peer's) as unspecified.
 *
 * KV (worker → gateway) changes to the worker's prefix cache, so the gateway
 *   can route a request to the replica that holds its prefix (gateway/
 *   prefix_index.h). Keys are the *public* block keys of common/prefix_key.h
 *   (a deterministic hash chain over token ids, the same on every replica and
 *   on the gateway), one per full KV block. Sent after the worker's steps
 *   whenever its cache changed, at most PROTO_MAX_KV_KEYS keys per list (more
 *   changes → several messages). The receiver applies, in this order: reset,
 *   then del, then add (the worker sends the net change, so a key is normally
 *   in one list only; one in both ends up added). After each REGISTER is acknowledged, and
 *   whenever its bounded event log overflowed, the worker sends its full set:
 *   a first message with reset, then as many messages of adds as needed.
 *   reset      bool  opt  forget every key of this replica first, default false
 *   add        array opt  ≤ PROTO_MAX_KV_KEYS uint (u64): blocks now cached
 *   del        array opt  ≤ PROTO_MAX_KV_KEYS uint (u64): blocks evicted
 *
 * DRAIN (gateway → worker) stop admitting SUBMITs (answer ERROR 503), finish
 *   the running ones, then exit. Empty body.
 * SHUTDOWN (gateway → worker) exit now. Empty body.
 *
 * LORA (gateway → worker) load or unload a LoRA adapter at run time
 *   (POST/DELETE /admin/models/{model}/loras). The worker answers LORA_ACK
 *   with the same seq; after a load or unload that succeeded it first sends
 *   a new REGISTER listing its adapters (so the gateway knows the set before
 *   it sees the ACK). Unloading leaves the adapter with the requests that
 *   hold it (they finish with it); new SUBMITs naming it are refused.
 *   seq        uint  req  the gateway's operation number, 1..2^64-1
 *   name       str   req  the adapter's name, 1..PROTO_MAX_NAME bytes
 *   path       str   opt  load: the GGUF file (on the worker's host),
 *                         1..PROTO_MAX_PATH bytes; absent = unload
 *   scale      float opt  load: its default scale, -100..100, default 1
 * LORA_ACK (worker → gateway) the answer to LORA.
 *   seq        uint  req  the LORA's seq
 *   name       str   req  the LORA's name, 1..PROTO_MAX_NAME bytes
 *   msg        str   opt  why it failed (lora_load's message), ≤ PROTO_MAX_ERROR_MSG
 *                         bytes; absent = done
 *
 * Liveness (Paranoid Pirate): each side sends HEARTBEAT every interval and
 * treats any valid message from the peer as a sign of life. The gateway
 * removes a worker after PROTO_LIVENESS of the worker's intervals of silence
 * (or at once when ZeroMQ reports the peer gone); the worker, after
 * PROTO_LIVENESS of the gateway's intervals, closes its socket and reconnects
 * with exponential backoff, then REGISTERs again. A worker's heartbeats come
 * from a thread that never waits on the forward pass, so silence means the
 * process is stopped or gone; a wedged step is caught by "prog" instead.
 * A worker adopts the hb_ms of the gateway's HEARTBEATs (the first one
 * acknowledges its REGISTER) unless its own interval was set explicitly.
 *
 * Ownership
 * ---------
 * proto_decode*() fills a proto_msg_t whose pointers are heap copies owned by
 * the message: release them with proto_msg_clear(). On error the output is
 * left cleared (nothing to free). proto_encode() and proto_send() only read
 * the message; a message the caller built from its own (non-heap) memory must
 * not be passed to proto_msg_clear().
 *
 * Why the decoder is hand-written: msgpack-c's unpacker allocates an array's
 * storage from the count in its header before reading any element (a 5-byte
 * body can ask for gigabytes) and builds a 24-byte object per element. Here
 * the body is read in place with a bounded cursor (proto/mpread.h) and every
 * count is checked against the field's limit first. Encoding uses msgpack-c.
 */
#ifndef PAGODA_PROTO_MSG_H
#define PAGODA_PROTO_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/sampling.h"
#include "proto/status.h"

/* --- constants (Majordomo style: all in one place) ------------------------- */

#define PROTO_TAG "PGDA01"      /* frame 1; 4-byte name + 2-digit version */
#define PROTO_TAG_LEN 6
#define PROTO_TAG_NAME_LEN 4    /* "PGDA" */
#define PROTO_VERSION 1

#define PROTO_MAX_BODY (16u << 20)        /* bytes in frame 3 */
#define PROTO_MAX_NAME 256                /* model, replica, host */
#define PROTO_MAX_PATH 4096               /* LORA path */
#define PROTO_MAX_ROLE 32                 /* chat role */
#define PROTO_MAX_PROMPT (8u << 20)       /* prompt, each message content */
#define PROTO_MAX_MESSAGES 1024
#define PROTO_MAX_TOKENS (1u << 20)       /* prompt_ids, resume, n_ctx */
#define PROTO_MAX_CHOICES 128             /* SUBMIT n_choices, and inputs of op embed */
#define PROTO_MAX_LORA 4            /* adapters in one SUBMIT's lora */
#define PROTO_MAX_REG_LORA 64       /* adapters in one REGISTER's lora (a worker's) */
#define PROTO_MAX_LORA_RANK 512     /* REGISTER lora rank */
#define PROTO_MAX_EMBED_DIM 65536         /* floats in one EVENT emb */
#define PROTO_MAX_TOKEN_ID 0x7fffffff
#define PROTO_MAX_STOP 16
#define PROTO_MAX_STOP_LEN 1024
#define PROTO_MAX_LOGIT_BIAS 1024
#define PROTO_MAX_TOP_LOGPROBS 20
#define PROTO_MAX_GRAMMAR (1u << 20)      /* SUBMIT grammar text (= GBNF_MAX_TEXT) */
#define PROTO_MAX_TEXT (1u << 20)         /* EVENT text delta */
#define PROTO_MAX_EVENT_IDS 4096          /* token ids in one EVENT */
#define PROTO_MAX_TOKEN_BYTES 1024        /* bytes of one token */
#define PROTO_MAX_ERROR_MSG 4096
#define PROTO_MAX_CAPACITY 65536
#define PROTO_MAX_BLOCK 4096
#define PROTO_MAX_DEPTH 8                 /* nesting of skipped unknown values */
#define PROTO_MAX_IDENTITY 255            /* ZeroMQ routing id bytes */
#define PROTO_MAX_KV_KEYS 8192            /* keys in one KV add/del list (64 KiB) */

#define PROTO_HEARTBEAT_MS 1000           /* default interval */
#define PROTO_MIN_HEARTBEAT_MS 10
#define PROTO_MAX_HEARTBEAT_MS 600000
#define PROTO_LIVENESS 3                  /* intervals of silence before "dead" */
#define PROTO_RECONNECT_MAX_MS 32000      /* worker backoff ceiling */
#define PROTO_PROGRESS_WINDOW 64          /* steps behind HEARTBEAT prog.slow_ms */
#define PROTO_PROGRESS_SCALE 20           /* hung: no step for this × the slowest recent one */
#define PROTO_PROGRESS_TIMEOUT_MS 30000   /* ... and at least this long (default) */

/* ERROR codes with a protocol meaning (others are HTTP statuses passed on).
 * proto_err_code() gives the one that goes with each typed cause. */
#define PROTO_CODE_BAD_REQUEST 400
#define PROTO_CODE_NOT_REGISTERED 409     /* gateway → worker, id 0 */
#define PROTO_CODE_TOO_LONG 413
#define PROTO_CODE_INTERNAL 500
#define PROTO_CODE_UNAVAILABLE 503

/* Typed error causes: ERROR and EVENT "err" (table in the header comment).
 * Wire constants: never renumber; add new ones at the end. */
typedef enum proto_err {
    PROTO_ERR_NONE = 0,             /* unspecified: go by the ERROR's code */
    PROTO_ERR_BAD_REQUEST = 1,
    PROTO_ERR_CONTEXT_LENGTH = 2,
    PROTO_ERR_DUPLICATE_ID = 3,
    PROTO_ERR_UNAVAILABLE = 4,
    PROTO_ERR_DEADLINE = 5,
    PROTO_ERR_ENGINE = 6,
    PROTO_ERR_NOT_REGISTERED = 7,
} proto_err_t;
#define PROTO_ERR_LAST PROTO_ERR_NOT_REGISTERED  /* the highest this version knows */
#define PROTO_MAX_ERR 255                        /* decoder range of "err" */

/* Frame 2. Values are wire constants: never renumber. */
typedef enum proto_type {
    PROTO_REGISTER = 1,
    PROTO_HEARTBEAT = 2,
    PROTO_SUBMIT = 3,
    PROTO_CANCEL = 4,
    PROTO_EVENT = 5,
    PROTO_ERROR = 6,
    PROTO_DRAIN = 7,
    PROTO_SHUTDOWN = 8,
    PROTO_KV = 9,
    PROTO_LORA = 10,
    PROTO_LORA_ACK = 11,
} proto_type_t;
#define PROTO_TYPE_MIN PROTO_REGISTER
#define PROTO_TYPE_MAX PROTO_LORA_ACK

typedef enum proto_priority {
    PROTO_PRIO_HIGH = 0,
    PROTO_PRIO_NORMAL = 1,
    PROTO_PRIO_LOW = 2,
} proto_priority_t;

typedef enum proto_kind {
    PROTO_KIND_CHAT = 0,        /* wire "chat" */
    PROTO_KIND_COMPLETION = 1,  /* wire "completion" */
} proto_kind_t;

typedef enum proto_op {
    PROTO_OP_GENERATE = 0,      /* "op" absent */
    PROTO_OP_TOKENIZE = 1,      /* wire "tokenize" */
    PROTO_OP_DETOKENIZE = 2,    /* wire "detokenize" */
    PROTO_OP_EMBED = 3,         /* wire "embed" */
    PROTO_OP_RANK = 4,          /* wire "rank" */
} proto_op_t;

typedef enum proto_finish {
    PROTO_FINISH_NONE = 0,      /* not finished: "finish" key absent */
    PROTO_FINISH_STOP,          /* "stop": EOS or a stop string */
    PROTO_FINISH_LENGTH,        /* "length": max_tok or context full */
    PROTO_FINISH_CANCELLED,     /* "cancelled": CANCEL received */
    PROTO_FINISH_ERROR,         /* "error": failed after starting */
    PROTO_FINISH_TIMEOUT,       /* "timeout": deadline_ms passed */
} proto_finish_t;


/* --- message bodies ------------------------------------------------------- */

#define PROTO_MAX_VIS_SIZE 4096   /* encoder input side, pixels */
#define PROTO_MAX_VIS_TOKENS 16384 /* embeddings per image */
#define PROTO_MAX_VIS_PROJ 31      /* bytes of a projector type name */
#define PROTO_MAX_VIS_PREPROC 16384 /* a tiled picture's longest side, pixels */

/* A worker's vision encoder (REGISTER `vis`). */
typedef struct proto_vis {
    bool has;                          /* vis present: the model takes images */
    uint32_t size;                     /* size: encoder input side, pixels */
    uint32_t n_tok;                    /* n_tok: embeddings per image */
    char proj[PROTO_MAX_VIS_PROJ + 1]; /* proj, NUL-terminated */
    uint32_t preproc;                  /* preproc: longest side before tiling, 0 = no tiles */
} proto_vis_t;

/* One adapter a worker has loaded (REGISTER `lora`). */
typedef struct proto_reg_lora {
    char *name;              /* name */
    uint64_t hash;           /* hash: prefix_key_bytes of its file */
    uint32_t rank;           /* rank: its largest */
    double scale;            /* scale: its default */
} proto_reg_lora_t;

typedef struct proto_register {
    uint32_t version;        /* v */
    char *model;             /* model */
    char *replica;           /* replica */
    char *host;              /* host */
    uint32_t pid;            /* pid */
    uint32_t capacity;       /* cap */
    uint32_t n_ctx;          /* n_ctx, tokens */
    uint32_t n_vocab;        /* n_vocab, 0 = unknown */
    uint32_t kv_blocks;      /* kv_blocks */
    uint32_t block_size;     /* block, tokens per KV block */
    uint32_t heartbeat_ms;   /* hb_ms */
    proto_vis_t vis;         /* vis; has = false when absent */
    proto_reg_lora_t *lora;  /* lora, (n_lora), owned with their names; NULL when absent */
    uint32_t n_lora;
} proto_register_t;

/* Worker load, carried by the worker's HEARTBEAT. */
typedef struct proto_load {
    uint32_t running;               /* run */
    uint32_t waiting;               /* wait */
    uint32_t kv_blocks_used;        /* kv_used */
    uint32_t kv_blocks_total;       /* kv_total */
    uint64_t prefix_cache_queries;  /* pc_q, cumulative, prompt tokens */
    uint64_t prefix_cache_hits;     /* pc_hit, cumulative, tokens */
    uint64_t preemptions;           /* preempt, cumulative */
    uint64_t tokens_generated;      /* gen_tok, cumulative */
    uint64_t prompt_tokens;         /* prompt_tok, cumulative */
    uint32_t free_slots;            /* free: credit */
    /* optional (absent = 0): the KV tiers (worker/kv_disk.h) */
    uint64_t prefix_cache_disk_hits; /* pc_disk, cumulative, prompt tokens loaded from the
                                      * disk tier (not in pc_hit, which counts RAM hits) */
    uint64_t kv_evictions;          /* kv_evict, cumulative, blocks evicted from RAM */
    uint32_t kv_disk_state;         /* kvd_state: 0 no disk tier, 1 on, 2 off after an error */
    uint64_t kv_disk_bytes_written; /* kvd_wb, cumulative */
    uint64_t kv_disk_bytes_read;    /* kvd_rb, cumulative */
    uint64_t kv_disk_evictions;     /* kvd_evict, cumulative, files removed by the size cap */
    uint64_t kv_disk_rejected;      /* kvd_rej, cumulative, torn/corrupt files not served */
    uint64_t kv_disk_bytes_used;    /* kvd_used, bytes of block files now */
    /* optional (absent = 0): speculative decoding (worker/spec.h), cumulative */
    uint64_t spec_drafts;           /* sd_n: verifies of a sequence with drafts */
    uint64_t spec_draft_tokens;     /* sd_dt: draft tokens verified */
    uint64_t spec_accepted_tokens;  /* sd_acc: of those, accepted */
    /* optional (absent = 0) */
    uint64_t steps_stopped;         /* stopped: steps stopped for a better tier, cumulative */
} proto_load_t;

/* Worker step progress, carried by the worker's HEARTBEAT. */
typedef struct proto_progress {
    uint64_t steps;                 /* steps, cumulative */
    bool busy;                      /* busy: holds requests */
    uint32_t stall_ms;              /* stall_ms: since the last step (or since busy), ms */
    uint32_t slow_ms;               /* slow_ms: slowest recent step, ms */
} proto_progress_t;

typedef struct proto_heartbeat {
    uint64_t seq;            /* seq */
    uint32_t heartbeat_ms;   /* hb_ms, 0 = not sent */
    bool has_load;           /* load present */
    proto_load_t load;       /* load */
    bool has_progress;       /* prog present */
    proto_progress_t progress; /* prog */
} proto_heartbeat_t;

#define PROTO_MAX_TILES 64        /* tiles of one picture (= IMAGE_RUN_MAX_TILES) */
#define PROTO_MAX_PICTURES 8      /* pictures per SUBMIT (= REQUEST_MAX_IMAGES) */
/* imgs per SUBMIT: each picture its tiles and its global image */
#define PROTO_MAX_IMAGES (PROTO_MAX_PICTURES * (PROTO_MAX_TILES + 1))
#define PROTO_MAX_PARTS 256       /* parts per message (= OAI_MAX_CONTENT_PARTS) */

/* One part of a message with images (msgs[i].parts): text, or an image. */
typedef struct proto_part {
    char *text;              /* a str part; NULL = the image img */
    uint32_t img;            /* a uint part: index into the SUBMIT's imgs */
} proto_part_t;

/* One decoded image of a SUBMIT (imgs[i]). */
typedef struct proto_img {
    uint32_t w, h;           /* w, h */
    uint8_t *rgb;            /* rgb, (h, w, 3) RGB8 */
    uint32_t n_rgb;          /* decoded: rgb's bytes (= w·h·3); the encoder ignores it */
    uint8_t hash[32];        /* hash */
    uint32_t nx, ny;         /* nx, ny: the first tile of a picture cut into nx × ny
                                (0 × 0: a picture of one image, or not a first tile) */
} proto_img_t;

typedef struct proto_chat_msg {
    char *role;              /* "system", "user", "assistant", ... */
    char *content;
    char *tool_calls;        /* tool_calls: JSON array text, NULL = absent */
    char *tool_call_id;      /* tool_call_id, NULL = absent */
    proto_part_t *parts;     /* parts, (n_parts); NULL = absent */
    uint32_t n_parts;
} proto_chat_msg_t;

typedef struct proto_logit_bias {
    int32_t token;           /* 0..PROTO_MAX_TOKEN_ID */
    double bias;             /* added to the logit, [-100, 100] */
} proto_logit_bias_t;

typedef struct proto_sampling {
    PROTO_KNOBS_FIELDS;          /* temp, top_p, top_k, ...: a member per row of
                                    PROTO_SAMPLING_KNOBS (proto/sampling.h) */
    bool has_seed;               /* seed present */
    uint64_t seed;               /* seed */
    proto_logit_bias_t *logit_bias;  /* bias, (n_logit_bias) */
    uint32_t n_logit_bias;
    bool logprobs;               /* logprobs */
    uint32_t top_logprobs;       /* top_lp */
} proto_sampling_t;

/* One input of op embed: text (tokenized by the worker) or token ids. */
typedef struct proto_input {
    char *text;                  /* t, NULL when ids are given */
    int32_t *ids;                /* ids, (n_ids); used when text is NULL */
    uint32_t n_ids;
} proto_input_t;

typedef struct proto_lora {
    char *name;                  /* name: the adapter as the worker knows it (--lora NAME=FILE) */
    bool has_scale;              /* scale present */
    double scale;                /* scale, when has_scale */
} proto_lora_t;

typedef struct proto_submit {
    uint64_t id;                 /* id */
    proto_priority_t priority;   /* prio */
    proto_kind_t kind;           /* kind */
    proto_chat_msg_t *messages;  /* msgs, (n_messages) */
    uint32_t n_messages;
    char *prompt;                /* prompt, NULL when absent */
    int32_t *prompt_ids;         /* prompt_ids, (n_prompt_ids), NULL when absent */
    uint32_t n_prompt_ids;
    bool has_prompt_ids;         /* prompt_ids key present (may be empty) */
    proto_sampling_t sampling;
    uint32_t max_tokens;         /* max_tok, 0 = until the context is full */
    char **stop;                 /* stop, (n_stop) */
    uint32_t n_stop;
    bool ignore_eos;             /* ignore_eos */
    bool no_spec;                /* no_spec */
    uint32_t deadline_ms;        /* deadline_ms, relative; 0 = none */
    bool stream;                 /* stream */
    int32_t *resume;             /* resume, (n_resume) */
    uint32_t n_resume;
    char *grammar;               /* grammar, GBNF text, NULL when absent */
    char *tools;                 /* tools: JSON array text, NULL = absent */
    char *tool_choice;           /* tool_choice, NULL = absent ("auto") */
    bool no_par_tools;           /* par_tools false */
    bool has_think;              /* think present */
    bool think;                  /* think: enable_thinking, when has_think */
    uint32_t n_choices;          /* n_choices; decoded: 1 when absent. Encoded only when > 1 */
    proto_op_t op;               /* op */
    bool no_special;             /* add_special: false (encoded only then) */
    proto_input_t *inputs;       /* inputs (op embed), (n_inputs); NULL otherwise */
    uint32_t n_inputs;
    uint32_t dimensions;         /* dims (op embed), 0 = absent */
    uint64_t partition;          /* part: prefix-cache partition, 0 = public (absent) */
    proto_lora_t lora[PROTO_MAX_LORA]; /* lora: adapters, in order, (n_lora) */
    uint32_t n_lora;
    proto_img_t *imgs;           /* imgs, (n_imgs); NULL = absent */
    uint32_t n_imgs;
} proto_submit_t;

typedef struct proto_cancel {
    uint64_t id;
} proto_cancel_t;

typedef struct proto_top_logprob {
    uint8_t *bytes;              /* b, (n_bytes), not NUL-terminated */
    uint32_t n_bytes;
    double logprob;              /* lp */
} proto_top_logprob_t;

typedef struct proto_logprob {
    uint8_t *bytes;              /* b */
    uint32_t n_bytes;
    double logprob;              /* lp */
    proto_top_logprob_t *top;    /* top, (n_top) */
    uint32_t n_top;
} proto_logprob_t;

typedef struct proto_usage {
    uint32_t prompt_tokens;      /* prompt */
    uint32_t cached_tokens;      /* cached */
    uint32_t completion_tokens;  /* completion */
} proto_usage_t;

typedef struct proto_event {
    uint64_t id;                 /* id */
    char *text;                  /* text; decoded: never NULL ("" when absent) */
    uint32_t text_len;           /* bytes, excluding the NUL */
    int32_t *ids;                /* ids, (n_ids) */
    uint32_t n_ids;
    uint32_t n_tokens;           /* n */
    uint32_t n_resumed;          /* n_resumed */
    uint32_t choice;             /* choice, 0 when absent */
    proto_logprob_t *logprobs;   /* lp, (n_logprobs): 0 or n_ids entries */
    uint32_t n_logprobs;
    proto_finish_t finish;       /* finish */
    bool has_usage;              /* usage present */
    proto_usage_t usage;         /* usage */
    uint32_t stop;               /* stop: 1 + index of the stop string that ended it, 0 = none */
    uint32_t err;                /* err: proto_err_t with finish error/timeout, 0 = unspecified */
    float *embedding;            /* emb (op embed), (n_embedding) floats; NULL otherwise */
    uint32_t n_embedding;
} proto_event_t;

typedef struct proto_error {
    uint64_t id;                 /* id, 0 = not request-specific */
    uint32_t code;               /* code */
    char *message;               /* msg */
    uint32_t err;                /* err: proto_err_t, 0 = unspecified */
} proto_error_t;

/* Prefix-cache changes of one worker (KV). */
typedef struct proto_kv {
    bool reset;                  /* reset: drop every key of this replica first */
    uint64_t *add;               /* add, (n_add) public block keys now cached */
    uint32_t n_add;
    uint64_t *del;               /* del, (n_del) public block keys evicted */
    uint32_t n_del;
} proto_kv_t;

/* A run-time adapter load or unload (LORA), or its answer (LORA_ACK). */
typedef struct proto_lora_op {
    uint64_t seq;                /* seq */
    char *name;                  /* name */
    char *path;                  /* LORA path: NULL = unload */
    double scale;                /* LORA scale (load; proto_msg_init sets 1) */
    char *message;               /* LORA_ACK msg: NULL = done */
} proto_lora_op_t;

/* One decoded (or to-be-encoded) message. DRAIN and SHUTDOWN use no member. */
typedef struct proto_msg {
    proto_type_t type;
    union {
        proto_register_t reg;
        proto_heartbeat_t heartbeat;
        proto_submit_t submit;
        proto_cancel_t cancel;
        proto_event_t event;
        proto_error_t error;
        proto_kv_t kv;
        proto_lora_op_t lora;    /* LORA, LORA_ACK */
    };
} proto_msg_t;

/* A ZeroMQ routing identity (ROUTER side). */
typedef struct proto_peer {
    uint8_t id[PROTO_MAX_IDENTITY];
    size_t len;
} proto_peer_t;

/* One frame as (pointer, length), for decoding frames from any source. */
typedef struct proto_frame {
    const uint8_t *data;
    size_t len;
} proto_frame_t;

/* --- API ------------------------------------------------------------------ */

/* Zeroes *m, sets its type and, for SUBMIT, priority normal and the
 * sampling knobs' defaults (proto_knobs_default), the rest 0/false. */
void proto_msg_init(proto_msg_t *m, proto_type_t type);

/* Frees every heap pointer of a *decoded* message and zeroes it. Safe on a
 * zeroed message and twice in a row. */
void proto_msg_clear(proto_msg_t *m);

/* Name of a type ("SUBMIT"), a finish reason ("stop", NULL for NONE), a kind
 * ("chat") and a status ("malformed msgpack"); static strings, never NULL
 * except as said. */
const char *proto_type_name(int type);
const char *proto_finish_name(proto_finish_t f);
const char *proto_kind_name(proto_kind_t k);
/* "tokenize", "detokenize", "embed", "rank" (wire op values); "generate" otherwise. */
const char *proto_op_name(proto_op_t op);
const char *proto_status_name(int status);
/* "context_length"... for a proto_err_t; "unspecified" for 0 and for values
 * this version does not know. */
const char *proto_err_name(uint32_t err);
/* The ERROR code that goes with err (table above); 500 for unknown ones. */
uint32_t proto_err_code(uint32_t err);
/* The typed cause an ERROR stands for: its err when this version knows it,
 * else the cause its code means (an older peer's ERROR): 409 not_registered,
 * 413 context_length, 503 unavailable, other 4xx bad_request, 5xx engine.
 * Never PROTO_ERR_NONE. */
proto_err_t proto_error_cause(const proto_error_t *e);
/* Why an EVENT finished with "error" or "timeout": its err when this version
 * knows it, else DEADLINE for "timeout" and ENGINE otherwise. */
proto_err_t proto_event_cause(const proto_event_t *ev);

/* Encodes m's body (frame 3) with msgpack-c into a malloc'd buffer the
 * caller frees. The message's own limits are not checked here — the peer's
 * decoder enforces them — except that a body over PROTO_MAX_BODY returns
 * PROTO_ERANGE with *body NULL. Returns PROTO_OK. */
int proto_encode(const proto_msg_t *m, uint8_t **body, size_t *body_len);

/* Decodes a body of the given type. Returns PROTO_OK with *out filled
 * (free with proto_msg_clear) or a negative proto_status with *out cleared —
 * except that a malformed SUBMIT, EVENT or ERROR whose request id was readable
 * (an unsigned integer ≥ 1 under the map's first "id" key, wherever it sits)
 * keeps its type and that id in submit.id / event.id / error.id (nothing else;
 * still nothing to free), so the receiver can end that request at once: the
 * worker answers ERROR(id), the gateway fails the request with 502. When err
 * is not NULL a message naming the offending field is written to
 * err[0..err_len). Never reads outside buf[0..len). */
int proto_decode_body(int type, const uint8_t *buf, size_t len, proto_msg_t *out,
                      char *err, size_t err_len);

/* Decodes frames 1..3 (identity already stripped): checks the frame count,
 * the tag and version, the type, then the body. Same contract as above. */
int proto_decode(const proto_frame_t *frames, size_t n_frames, proto_msg_t *out,
                 char *err, size_t err_len);

/* Sends m on a ZeroMQ socket as one multipart message; when `to` is not NULL
 * (ROUTER side) the identity frame goes first. flags: 0 or ZMQ_DONTWAIT.
 * Returns PROTO_OK, or PROTO_ESYS with errno set (EAGAIN: would block;
 * EHOSTUNREACH: unknown peer on a ROUTER with ZMQ_ROUTER_MANDATORY). */
int proto_send(void *sock, const proto_peer_t *to, const proto_msg_t *m, int flags);

/* Receives one multipart message and decodes it. When `from` is not NULL
 * (ROUTER side) the first frame is taken as the sender's identity and stored
 * there. Every frame of the message is consumed, even a malformed one.
 * Returns PROTO_OK (*out to be cleared by the caller), PROTO_ESYS with errno
 * (EAGAIN with ZMQ_DONTWAIT and nothing queued, EINTR, ETERM), or a negative
 * proto_status for a malformed message (already dropped; `from` is still
 * filled when it was readable, so the caller may log who sent it). */
int proto_recv(void *sock, proto_peer_t *from, proto_msg_t *out, int flags,
               char *err, size_t err_len);

#endif
