#!/usr/bin/python3
"""tokenizer_gguf.py — test vocabularies between Hugging Face tokenizer.json and GGUF.

  hf2gguf TOKENIZER_JSON CONFIG_JSON OUT.gguf --model gpt2|llama [--pre NAME]
          [--space-prefix true|false]
      Writes a metadata-only GGUF with the tokenizer.ggml.* keys the way
      llama.cpp's converter lays them out: tokens in id order, token types
      (special added tokens CONTROL, other added tokens USER_DEFINED, the unk
      token UNKNOWN, <0xNN> BYTE), merges as "left right" strings (gpt2) or,
      for a SentencePiece-derived BPE (llama), scores = -(rank of the first
      merge that produces the token), which orders merges exactly as the
      tokenizer.json does. --space-prefix writes
      tokenizer.ggml.add_space_prefix (false for Gemma 2/3, whose
      SentencePiece model adds no dummy-prefix space; llama.cpp's converter
      writes it so). --spm-added (with --model llama) lays the added tokens
      out as llama.cpp's SentencePiece converter does (Gemma 2/3): CONTROL
      when special or special-looking (<mask>, <unusedN>, <|..|>), else
      USER_DEFINED with "▁" replaced by " "; score -1000.

  gguf2hf IN.gguf TEMPLATE_JSON OUT_DIR
      The reverse for a GGUF "llama" (SentencePiece) vocabulary such as
      stories260K: writes OUT_DIR/tokenizer.json (+ tokenizer_config.json)
      whose BPE merges are derived from the pieces and scores the way the
      Hugging Face SentencePiece converter does (every split of a piece into
      two pieces, ordered by the score of the merged piece, then by the ids
      of the parts). TEMPLATE_JSON (the llama2 tokenizer.json) provides the
      normalizer / decoder / post-processor of a Llama SentencePiece tokenizer.
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_vocab  # noqa: E402

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
BYTE_RE = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")


def token_content(v):
    if isinstance(v, dict):
        return v.get("content")
    return v


def looks_special(s):
    """Added tokens llama.cpp's converter makes CONTROL though not marked
    special (Gemma's <mask>, <unusedN>; <|...|>)."""
    return (s in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (s.startswith("<|") and s.endswith("|>"))
            or (s.startswith("<unused") and s.endswith(">")))


def hf2gguf(a):
    with open(a.tokenizer_json, encoding="utf-8") as f:
        tj = json.load(f)
    with open(a.config_json, encoding="utf-8") as f:
        cfg = json.load(f)
    model = tj["model"]
    assert model["type"] == "BPE", "only BPE tokenizer.json files are converted"
    vocab = dict(model["vocab"])
    added = {t["id"]: t for t in tj.get("added_tokens", [])}
    for i, t in added.items():
        vocab[t["content"]] = i
    n = max(vocab.values()) + 1
    tokens = [None] * n
    for s, i in vocab.items():
        tokens[i] = s
    missing = [i for i, s in enumerate(tokens) if s is None]
    assert not missing, "vocabulary has holes: %r" % missing[:5]
    unk = model.get("unk_token")
    types = []
    for i, s in enumerate(tokens):
        if i in added:
            if unk is not None and s == unk:
                types.append(UNKNOWN)
            elif a.spm_added:
                # llama.cpp's SentencePiece converter: special or
                # special-looking added tokens are CONTROL; the others
                # USER_DEFINED with their "▁" turned into spaces
                # ("pre-normalized"), so Gemma's whitespace runs match
                # spaces in the raw text
                if added[i]["special"] or looks_special(s):
                    types.append(CONTROL)
                else:
                    types.append(USER_DEFINED)
                    tokens[i] = s.replace("\u2581", " ")
            else:
                types.append(CONTROL if added[i]["special"] else USER_DEFINED)
        elif a.model == "llama" and BYTE_RE.match(s):
            types.append(BYTE)
        else:
            types.append(NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]

    items = [("general.architecture", "STRING", "llama"),
             ("tokenizer.ggml.model", "STRING", a.model)]
    if a.pre:
        items.append(("tokenizer.ggml.pre", "STRING", a.pre))
    items.append(("tokenizer.ggml.tokens", "ARRAY", "STRING", tokens))
    items.append(("tokenizer.ggml.token_type", "ARRAY", "INT32", types))
    if a.model == "gpt2":
        items.append(("tokenizer.ggml.merges", "ARRAY", "STRING", merges))
    else:
        first = {}
        for r, m in enumerate(merges):
            left, right = m.split(" ", 1)
            first.setdefault(left + right, r)
        scores = [float(-first[s]) if s in first and types[i] == NORMAL else 0.0
                  for i, s in enumerate(tokens)]
        if a.spm_added:
            for i in added:
                scores[i] = -1000.0
        items.append(("tokenizer.ggml.scores", "ARRAY", "FLOAT32", scores))
    for key, name in (("bos_token", "bos"), ("eos_token", "eos"), ("unk_token", "unknown")):
        c = token_content(cfg.get(key))
        if c is not None and c in vocab:
            items.append(("tokenizer.ggml.%s_token_id" % name, "UINT32", vocab[c]))
    for key in ("add_bos_token", "add_eos_token"):
        if key in cfg and isinstance(cfg[key], bool):
            items.append(("tokenizer.ggml." + key, "BOOL", cfg[key]))
    if a.space_prefix is not None:
        items.append(("tokenizer.ggml.add_space_prefix", "BOOL", a.space_prefix == "true"))
    gguf_vocab.write_kv(a.out, items)


def gguf2hf(a):
    kv = gguf_vocab.read_kv(a.gguf)
    assert kv["tokenizer.ggml.model"] == "llama"
    tokens = kv["tokenizer.ggml.tokens"]
    scores = kv["tokenizer.ggml.scores"]
    types = kv["tokenizer.ggml.token_type"]
    vocab = {s: i for i, s in enumerate(tokens)}
    normal = {s: i for i, s in enumerate(tokens) if types[i] == NORMAL}
    # Hugging Face's SentencePiece extractor: every piece split in two pieces
    # of the vocabulary is a merge; merges ordered by the merged piece's score
    # (stable sort, highest first), ties by the ids of the two parts.
    merges = []
    for piece, pid in sorted(normal.items(), key=lambda kv_: kv_[1]):
        local = []
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in normal and right in normal:
                local.append((left, right, scores[pid]))
        local.sort(key=lambda x: (vocab[x[0]], vocab[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda x: x[2], reverse=True)
    with open(a.template, encoding="utf-8") as f:
        tj = json.load(f)
    unk_id = kv.get("tokenizer.ggml.unknown_token_id")
    bos_id = kv.get("tokenizer.ggml.bos_token_id")
    eos_id = kv.get("tokenizer.ggml.eos_token_id")
    tj["added_tokens"] = [
        {"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for i in range(len(tokens)) if types[i] in (CONTROL, UNKNOWN)]
    tj["model"]["vocab"] = vocab
    tj["model"]["merges"] = ["%s %s" % (l, r) for l, r, _ in merges]
    tj["model"]["unk_token"] = tokens[unk_id]
    bos = tokens[bos_id]
    tj["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}
    cfg = {"add_bos_token": True, "add_eos_token": False, "bos_token": bos, "eos_token": tokens[eos_id],
           "unk_token": tokens[unk_id], "legacy": True, "clean_up_tokenization_spaces": False,
           "tokenizer_class": "LlamaTokenizer", "model_max_length": 512}
    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    with open(os.path.join(a.out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hf2gguf")
    h.add_argument("tokenizer_json")
    h.add_argument("config_json")
    h.add_argument("out")
    h.add_argument("--model", choices=["gpt2", "llama"], required=True)
    h.add_argument("--pre")
    h.add_argument("--space-prefix", choices=["true", "false"])
    h.add_argument("--spm-added", action="store_true")
    g = sub.add_parser("gguf2hf")
    g.add_argument("gguf")
    g.add_argument("template")
    g.add_argument("out_dir")
    a = p.parse_args()
    hf2gguf(a) if a.cmd == "hf2gguf" else gguf2hf(a)


if __name__ == "__main__":
    main()
