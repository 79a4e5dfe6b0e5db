/* tool_grammar.h — the grammar that makes a model call a tool.
 *
 * For tool_choice "required" or a named function the worker constrains the
 * output (constrained decoding, sched_req_t.grammar) to exactly the call
 * syntax its chat template taught the model, with each tool's `parameters`
 * compiled from JSON Schema (common/grammar/json_schema.h), so even a weak
 * or random-weight model writes a call the gateway parses
 * (tool_format_extract, through gateway/oai_tools.h) with arguments that
 * validate. The syntax is the family's markers (common/text/tool_format.h):
 *
 *   root ::= open call (sep call)* close      (one call without parallel or sep)
 *   call ::= call_open "{\"name\": \"" call-body "}" call_close
 *
 * which gives:
 *
 *   hermes  root ::= call ("\n" call)*        (one call without parallel)
 *           call ::= "<tool_call>\n{\"name\": \"" ( "f\", \"arguments\": " f-args | ... ) "}\n</tool_call>"
 *   mistral root ::= "[TOOL_CALLS][" call (", " call)* "]"   (one call without parallel)
 *           call ::= "{\"name\": \"" ( "f\", \"arguments\": " f-args | ... ) "}"
 *           (Mistral Nemo; [TOOL_CALLS] is spelled in text tokens: the
 *           grammar never allows control tokens)
 *   llama3  root ::= call   (one call: the Llama 3.1 templates take one per turn)
 *           call ::= "{\"name\": \"" ( "f\", \"parameters\": " f-args | ... ) "}"
 *
 * A tool without `parameters` takes any JSON object. A schema the compiler
 * refuses is an error when the tool says "strict": true (the gateway
 * already answers 400 for those, gateway/oai_tools.c). Otherwise the schema
 * is compiled relaxed (json_schema_to_gbnf_relaxed): only the refused
 * keywords are dropped, everything else is enforced, and what was relaxed
 * is logged once per request (a warning naming each tool and JSON pointer);
 * only a schema past the size limits falls back to any JSON object. OpenAI
 * guarantees schema adherence only in strict mode; vLLM and llama.cpp
 * likewise enforce what their compilers support.
 */
#ifndef PAGODA_TEXT_TOOL_GRAMMAR_H
#define PAGODA_TEXT_TOOL_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>

/* tools_json: the SUBMIT's tools (JSON array of OpenAI tools); choice:
 * "required" or "function:NAME"; fmt: chat_template_tool_format() (a
 * tool_format_t name; an unknown one is taken as hermes). Returns
 * the GBNF text (malloc'd, caller frees), or NULL with a message in err
 * (unknown function, a strict schema that does not compile, bad JSON). */
char *tool_grammar_build(const char *tools_json, const char *choice, bool parallel, const char *fmt,
                         char *err, size_t errlen);

#endif
