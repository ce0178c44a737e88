#!/usr/bin/env python3
"""Generates tests/data/tokenizer_golden.txt: golden token ids for tests/test_tokenizer.c.

The references are independent of kvq:
  - GPT-2 byte-level BPE (SmolLM2 vocab): the Hugging Face `tokenizers` library,
    built from the GGUF vocab and merges with the pre-tokenizer of each `pre`
    value: smollm = Digits(individual) + ByteLevel regex, gpt2 = ByteLevel regex,
    qwen2 = Split(Qwen2 regex) + ByteLevel without regex.
  - SentencePiece (Gemma 3 vocab): the `sentencepiece` library, with a BPE model
    proto built from the GGUF tokens, scores and token types (identity
    normalizer, no dummy prefix, byte fallback; user-defined pieces with their
    spaces escaped to U+2581, so runs of spaces/newlines/tabs and HTML tags are
    matched whole as llama.cpp does).

Usage (development only, not needed by CI):
  pip install gguf tokenizers sentencepiece protobuf
  python3 scripts/gen_tokenizer_golden.py [--models models] [--out tests/data/tokenizer_golden.txt]

Line format (lines starting with '#' are comments):
  <case> <add_special> <parse_special> <input as hex utf-8 ('-' if empty)> : <id> <id> ...
where <case> is smollm | gpt2 | qwen2 (SmolLM2 vocab) or gemma3 (Gemma 3 vocab).
"""
import argparse
import os
import random

import gguf

SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = "gemma-3-270m-q4_k_m.gguf"

QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+")

FIXED = [
    "", " ", "  ", "\n", "Hello world", "hello  world", "   leading spaces", "trailing spaces   ",
    "tabs\tand\nnewlines\n\n\nend", " \n \n", "  \t  \n", "\r\n windows\r\n", "x\n\n\n\n\ny",
    "12345678", "3.14159 and 1,000,000", "year 2024: 42 items", "a1b22c333d4444",
    "don't I'll we've they're it's He'd I'm", "DON'T WE'LL", "can't'", "'s 's",
    "café naïve résumé Ångström", "Привет мир", "日本語のテキスト", "中文测试，标点。", "한국어 텍스트",
    "👋🌍 😀👍🏽 👨‍👩‍👧", "🤖", "Ελληνικά και ١٢٣ ٤٥", "ﬁ ligature ½ ²",
    "def foo(x):\n    return x + 1\n\tif x:\n\t\tpass\n", "int main() { return 0; }",
    "    indented\n        more\n", "for (i = 0; i < n; ++i) {\n    a[i] *= 2;\n}",
    "Hello, World! How's it going?", "e-mail: test@example.com https://x.y/z?q=1&r=2",
    "\u00a0non-breaking\u00a0space", "zero\u200bwidth", "a" + " " * 40 + "b",
    "<b>bold</b> and <i>it</i>", "<table><tr><td>1</td></tr></table>",
    "𓀀 hieroglyph", "\U0001F9EC dna", "mixed123abc!!!???...",
    "The quick brown fox jumps over the lazy dog. " * 3,
    "   ", "\t", "\n\n", " a", "a ", "!!!", "...\n", "' ", " '", "a'b", "l'été",
]
SPECIAL_SMOL = ["<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
                "text<|endoftext|>more", "<|im_start|><|im_end|>", "<|im_start", "x <|im_end|> y"]
SPECIAL_GEMMA = ["<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
                 "<bos>hi", "x <end_of_turn> y", "<start_of_turn", "<eos><pad>"]

POOLS = ["abcxyzABCXYZ", "éüñçßøÅ", "Жизнь", "日本中文字", "한국", "0123456789", "٣٤", " ", "  ",
         "\t", "\n", "\r", ".,;:!?-_()[]{}<>/\\'\"`~@#$%^&*+=|", "'s", "'t", "'re", "'ll", "'D",
         "👋🏽", "😀", "\u200d", "\u00a0", "\u3000", "ſ", "ǅ", "Ⅻ", "½"]


def random_strings(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            pool = rng.choice(POOLS)
            if len(pool) <= 3:
                parts.append(pool)
            else:
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 4))))
        out.append("".join(parts))
    return out


def read_vocab(path):
    r = gguf.GGUFReader(path)

    def strs(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    def nums(key):
        f = r.fields[key]
        return [f.parts[i][0].item() for i in f.data]

    v = {"tokens": strs("tokenizer.ggml.tokens"), "types": nums("tokenizer.ggml.token_type")}
    if "tokenizer.ggml.merges" in r.fields:
        v["merges"] = strs("tokenizer.ggml.merges")
    if "tokenizer.ggml.scores" in r.fields:
        v["scores"] = nums("tokenizer.ggml.scores")
    return v


def hf_bpe(v, pre):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    vocab = {t: i for i, t in enumerate(v["tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in v["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    if pre == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    elif pre == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif pre == "qwen2":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(v["tokens"], v["types"]) if ty == 3])

    def enc(text, add_special, parse_special):
        tok.encode_special_tokens = not parse_special
        return tok.encode(text, add_special_tokens=False).ids  # SmolLM2: add_bos_token false
    return enc


def sp_gemma(v):
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb
    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.vocab_size = len(v["tokens"])
    m.trainer_spec.pad_id, m.trainer_spec.eos_id, m.trainer_spec.bos_id, m.trainer_spec.unk_id = 0, 1, 2, 3
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = False
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    for t, s, ty in zip(v["tokens"], v["scores"], v["types"]):
        p = m.pieces.add()
        p.piece = t.replace(" ", "\u2581") if ty == 4 else t
        p.score = s
        p.type = ty
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(m.SerializeToString())
    control = {t: i for i, (t, ty) in enumerate(zip(v["tokens"], v["types"])) if ty == 3}

    def enc(text, add_special, parse_special):
        ids = [2] if add_special else []  # add_bos_token true, add_eos_token false
        if not parse_special:
            return ids + sp.encode(text)
        # split on control tokens (leftmost, longest), encode the text between
        i = start = 0
        while i < len(text):
            best = None
            if text[i] == "<":
                j = text.find(">", i)
                if j >= 0 and text[i:j + 1] in control:
                    best = text[i:j + 1]
            if best:
                ids += sp.encode(text[start:i]) + [control[best]]
                i = start = i + len(best)
            else:
                i += 1
        return ids + sp.encode(text[start:])
    return enc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="models")
    ap.add_argument("--out", default="tests/data/tokenizer_golden.txt")
    a = ap.parse_args()
    smol = read_vocab(os.path.join(a.models, SMOL))
    gemma = read_vocab(os.path.join(a.models, GEMMA))
    rnd = random_strings(150, 1234)
    cases = [("smollm", hf_bpe(smol, "smollm"), SPECIAL_SMOL),
             ("gpt2", hf_bpe(smol, "gpt2"), SPECIAL_SMOL),
             ("qwen2", hf_bpe(smol, "qwen2"), SPECIAL_SMOL),
             ("gemma3", sp_gemma(gemma), SPECIAL_GEMMA)]
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("# Golden token ids for tests/test_tokenizer.c; produced by scripts/gen_tokenizer_golden.py\n")
        f.write("# (HF tokenizers for the GPT-2 BPE cases, sentencepiece for gemma3). Format: see the script.\n")
        for name, enc, special in cases:
            items = [(t, 0, 0) for t in FIXED + rnd]
            items += [(t, 1, 1) for t in special] + [(t, 0, 0) for t in special]
            items += [(t, 1, 1) for t in FIXED[:8]]
            for text, add_special, parse_special in items:
                ids = enc(text, add_special, parse_special)
                hx = text.encode("utf-8").hex() if text else "-"
                f.write("%s %d %d %s : %s\n" % (name, add_special, parse_special, hx, " ".join(map(str, ids))))


if __name__ == "__main__":
    main()
