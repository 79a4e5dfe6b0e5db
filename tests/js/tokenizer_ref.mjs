// tokenizer_ref.mjs — expected token ids from the reference tokenizers
// (@lenml/tokenizers, a port of Hugging Face transformers.js) for pagoda's
// tokenizer tests.
//
//   node tokenizer_ref.mjs SPEC.json CORPUS.json OUT.json
//
// SPEC.json: [{"name", "tokenizer_json", "config_json", "variant",
//              "add_special", "gguf"}]
//   variant "as-is"   the tokenizer.json unchanged
//           "gpt2"    pre-tokenizer replaced by GPT-2's ByteLevel regex split
//           "smollm"  digits isolated first, then GPT-2's regex
//   (both also turn ignore_merges off, as llama.cpp does for those
//   pre-tokenizers)
// CORPUS.json: array of strings.
// OUT.json: {"vocabs": [{"name", "gguf", "add_special",
//             "cases": [{"text", "parse_special", "ids"}]}]}
// parse_special = false is produced by dropping every added token marked
// "special" before building the tokenizer, so their texts are plain text.
import { readFileSync, writeFileSync } from "node:fs";
import { TokenizerLoader } from "@lenml/tokenizers";

const [specPath, corpusPath, outPath] = process.argv.slice(2);
const specs = JSON.parse(readFileSync(specPath, "utf8"));
const corpus = JSON.parse(readFileSync(corpusPath, "utf8"));

const GPT2_BYTELEVEL = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true };

function build(spec, parseSpecial) {
  const tj = JSON.parse(readFileSync(spec.tokenizer_json, "utf8"));
  const cfg = JSON.parse(readFileSync(spec.config_json, "utf8"));
  if (spec.variant === "gpt2") {
    tj.pre_tokenizer = GPT2_BYTELEVEL;
    tj.model.ignore_merges = false;
  } else if (spec.variant === "smollm") {
    tj.pre_tokenizer = {
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: "\\p{N}" }, behavior: "Isolated", invert: false },
        GPT2_BYTELEVEL,
      ],
    };
    tj.model.ignore_merges = false;
  } else if (spec.variant !== "as-is") {
    throw new Error("unknown variant " + spec.variant);
  }
  if (!parseSpecial) {
    tj.added_tokens = tj.added_tokens.filter((t) => !t.special);
    delete cfg.added_tokens_decoder;
    cfg.additional_special_tokens = [];
  }
  return TokenizerLoader.fromPreTrained({ tokenizerJSON: tj, tokenizerConfig: cfg });
}

const out = { vocabs: [] };
for (const spec of specs) {
  const v = { name: spec.name, gguf: spec.gguf, add_special: spec.add_special, cases: [] };
  for (const parseSpecial of [true, false]) {
    const tok = build(spec, parseSpecial);
    for (const text of corpus) {
      const ids = tok.encode(text, { add_special_tokens: spec.add_special });
      v.cases.push({ text, parse_special: parseSpecial, ids: Array.from(ids, Number) });
    }
  }
  out.vocabs.push(v);
}
writeFileSync(outPath, JSON.stringify(out));
