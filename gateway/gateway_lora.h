/* gateway_lora.h — LoRA adapters loaded and unloaded at run time
 * (POST /admin/models/{model}/loras, DELETE .../loras/{name}, vLLM's
 * /v1/load_lora_adapter and /v1/unload_lora_adapter; docs/API.md).
 *
 * A load: the HTTP thread checks the file (gateway_lora_check_file) and asks
 * the core (gateway_lora_admin); the core checks the model and the name,
 * appends a LOADING entry to the lora table (gateway/lora_table.h), sends
 * LORA (proto/msg.h) to every ready local worker of the model and keeps the
 * operation until each answered LORA_ACK (each REGISTERs its new set just
 * before, which teaches the table the adapter's hash), its worker is gone,
 * or gw->lora_timeout_us (--lora-timeout) passed. All loaded: the entry is LIVE, the
 * supervisor restarts the model's workers with the adapter from now on, and
 * the answer is 200. A worker refused: 400 with its message; timed out: 504;
 * either way the entry is GONE and the workers that loaded it unload it.
 *
 * An unload makes the entry GONE at once (new requests naming the adapter
 * get 404), drops it from the supervisor's flags, sends LORA without path
 * to each ready worker of the model that lists it and answers 200 once they
 * acknowledged (or the timeout: still 200, the adapter is unreachable
 * anyway). Requests already running keep the adapter to their end (the
 * worker's references, worker/worker_lora.h).
 *
 * Ownership: gateway_lora_admin returns a json_t the caller owns:
 * {"status": HTTP status, ...the answer or {"error": {...}}}. */
#ifndef PAGODA_GATEWAY_GATEWAY_LORA_H
#define PAGODA_GATEWAY_GATEWAY_LORA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/oai_error.h"
#include "proto/msg.h"

struct gateway;
struct gateway_worker;
struct gateway_lora_op;

/* What the HTTP side asks (strings copied by gateway_lora_admin). */
typedef struct gateway_lora_req {
    bool load;                    /* else unload */
    char *model, *name, *path;    /* path: load only */
    double scale;                 /* load only */
} gateway_lora_req_t;

/* Any thread: is path a file the gateway may hand its workers as an
 * adapter? lstat: a regular file (a symlink is refused, not followed: the
 * operator names the file itself), readable by this process, GGUF with
 * general.type = "adapter". 0, or -1 with a 400 (param "path"; the message
 * names the path, never the file's content). */
int gateway_lora_check_file(const char *path, oai_error_t *e);

/* Any thread: runs the load or unload and waits for its answer (bounded by
 * gw->lora_timeout_us and a margin). NULL when the core did not answer. */
json_t *gateway_lora_admin(struct gateway *gw, const gateway_lora_req_t *rq);

/* The core's side runs as a GATEWAY_CMD_CALL_LATER command and installs
 * the core's hooks (struct gateway lora_ack, lora_tick, lora_stop): a
 * worker's LORA_ACK, deadlines and gone workers, and 503 for what still
 * waits when the core stops. */

#endif
