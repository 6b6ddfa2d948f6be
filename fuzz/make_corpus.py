#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/) from the
files strata ships (recipes/, eval/ with its data, data/), cut small so that a
seed executes fast: a few rows of each data file, tiny models.

    fuzz/make_corpus.py [--strata build/strata] [--out fuzz/corpus]

The checkpoint seeds need a strata binary (a tiny model trained for one step
on text from data/, and a tiny llama2.c model converted), and so do the
resolved recipes (`strata train <recipe> --dry-run`: bases and defaults
included); without one they are left as they are. Multi-file seeds join their files with the separator line
of fuzz/fuzz_util.h. Standard library only; deterministic.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEP = b"\n==part==\n"


def read(path):
    with open(os.path.join(REPO, path), "rb") as f:
        return f.read()


def head_lines(path, n, max_line=1200):
    lines = [l for l in read(path).split(b"\n") if l.strip()][:n]
    return b"\n".join(l[:max_line] if not l.startswith(b"{") else l for l in lines) + b"\n"


class Corpus:
    def __init__(self, out):
        self.out = out

    def add(self, target, name, data):
        d = os.path.join(self.out, target)
        os.makedirs(d, exist_ok=True)
        if isinstance(data, str):
            data = data.encode()
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


# ----------------------------------------------------------------- recipes


def recipes(c, strata):
    for name in sorted(os.listdir(os.path.join(REPO, "recipes"))):
        if not name.endswith(".toml"):
            continue
        text = read("recipes/" + name)
        # Bases are relative to recipes/; the harness loads from a scratch
        # directory, so the base line is dropped (one seed keeps it).
        c.add("recipe", name, re.sub(rb"(?m)^base *=.*\n", b"", text))
        if strata and not name.startswith("spd"):  # resolved, bases and defaults included
            r = subprocess.run([strata, "train", "recipes/" + name, "--dry-run"], cwd=REPO,
                               capture_output=True)
            if r.returncode == 0:  # (a dry run may also check the run directory)
                c.add("recipe", "resolved-" + name, r.stdout)
    c.add("recipe", "with-base.toml", read("recipes/sft.toml"))
    c.add("recipe", "sets.toml", SEP.join([read("recipes/debug.toml"), b"training.steps=5",
                                           b"run.name=fuzz", b"optimizer.lr=1e-3",
                                           b"training.trainable=[\"layers:0-1\"]"]))
    c.add("recipe", "plan.toml", b"""[model]
hidden_size = 64
intermediate_size = 160
num_hidden_layers = 4
num_attention_heads = 4
plan = "standard,lp*2,ladder"

[training]
steps = 10
trainable = ["model.layers.*.mlp.*", "layers:2-3"]
freeze = ["lm_head.weight"]

[lr_scheduler]
kind = "linear"
warmup_steps = 2
decay_steps = 8
min_lr = 1e-5
""")


# ----------------------------------------------------------------- shards


def shard(tokens, doc_starts, width):
    head = b"STRATOK1" + struct.pack("<IIQQ", 1, width, len(tokens), len(doc_starts) - 1)
    head += b"\0" * (64 - len(head))
    fmt = "<%d%s" % (len(tokens), "H" if width == 2 else "I")
    return head + struct.pack(fmt, *tokens) + struct.pack("<%dQ" % len(doc_starts), *doc_starts)


def shards(c):
    text = read("data/corpora/tinyshakespeare/input.txt")[:2000]
    paras = [p for p in text.split(b"\n\n") if p.strip()]
    sha = hashlib.sha256(read("data/tokenizers/tok512.model")).hexdigest()

    def split(docs, vocab):
        tokens, starts = [], [0]
        for d in docs:
            tokens += [1] + [3 + b % (vocab - 3) for b in d[:60]]
            starts.append(len(tokens))
        return tokens, starts

    for width, vocab, name in ((2, 512, "two-byte"), (4, 70000, "four-byte")):
        train, train_starts = split(paras[:-2], vocab)
        val, val_starts = split(paras[-2:], vocab)
        parts = [shard(train, train_starts, width), shard(val, val_starts, width)]
        train_shards = ["train-00000.tokens"]
        if width == 4:  # two train shards: the document index continues across them
            half = train_starts[len(train_starts) // 2]
            first = shard(train[:half], train_starts[:len(train_starts) // 2 + 1], width)
            second = shard(train[half:], [s - half for s in train_starts[len(train_starts) // 2:]],
                           width)
            parts = [first, parts[1], second]
            train_shards.append("train-00001.tokens")
        meta = {
            "add_bos": True, "add_eos": False, "bos_id": 1, "eos_id": 2,
            "format": "strata-tokens-v1",
            "sources": [{"bytes": len(text), "documents": len(paras),
                         "path": "data/corpora/tinyshakespeare/input.txt", "sha256": sha}],
            "token_bytes": width, "tokenizer_sha256": sha,
            "train": {"documents": len(train_starts) - 1, "shards": train_shards,
                      "tokens": len(train)},
            "val": {"documents": len(val_starts) - 1, "shards": ["val-00000.tokens"],
                    "tokens": len(val)},
            "vocab_size": vocab,
        }
        c.add("shards", name, SEP.join([json.dumps(meta, indent=2).encode()] + parts))


# ----------------------------------------------------------------- sft


def sft(c):
    c.add("sft", "austen-train", head_lines("data/sft/austen_sft_train.jsonl", 3))
    c.add("sft", "austen-val", head_lines("data/sft/austen_sft_val.jsonl", 2))
    msgs = [{"messages": [{"role": "system", "content": "You answer briefly."},
                          {"role": "user", "content": "Who wrote Emma?"},
                          {"role": "assistant", "content": "Jane Austen."},
                          {"role": "user", "content": "When?"},
                          {"role": "assistant", "content": "In 1815."}]},
            {"prompt": "Say hello.", "response": "Hello!"}]
    c.add("sft", "messages", "\n".join(json.dumps(m) for m in msgs) + "\n\n")


# ----------------------------------------------------------------- tasks


def tasks(c):
    for name in sorted(os.listdir(os.path.join(REPO, "eval"))):
        if not name.endswith(".toml"):
            continue
        toml = read("eval/" + name).decode()
        files = []

        def data_part(key, rel):
            path = os.path.normpath(os.path.join("eval", rel))
            if "*" in path:  # MMLU: one subject's file
                d = os.path.dirname(path)
                path = os.path.join(d, sorted(os.listdir(os.path.join(REPO, d)))[0])
            if path.endswith(".txt") or path.endswith(".raw"):
                body = read(path)[:1500]
            elif path.endswith(".csv"):
                body = head_lines(path, 4)
            else:
                body = head_lines(path, 4 if key != "labels" else 4)
            files.append(body)
            return '%s = "d_%d"' % (key, len(files))

        toml = re.sub(r'(?m)^(data|fewshot_data|labels|fewshot_labels) = "([^"]*)"',
                      lambda m: data_part(m.group(1), m.group(2)), toml)
        if "[categories]" in toml:  # the groups of the cut data: one file, group "d"
            toml = toml[:toml.index("[categories]")] + '[categories]\nstem = ["d"]\n'
        c.add("task", name[:-5], SEP.join([toml.encode()] + files))
    c.add("task", "hellaswag_original", SEP.join([b"""summary = "HellaSwag, original format"
kind = "multiple_choice"
format = "hellaswag_original"
data = "d_1"
fewshot_data = "d_2"
shots = 1
text = "{query}"
choices = "choices"
gold = "label"
""", json.dumps({"activity_label": "Removing ice from car", "ctx_a": "Then, the man writes over the "
                 "snow [title] covering the window.", "ctx_b": "a woman smiles.",
                 "endings": [" the man adds wax.", " a person boards a lift.", " she leaves.",
                             " it snows."], "label": "3"}).encode() + b"\n",
        json.dumps({"activity_label": "Baking", "ctx_a": "A cake is shown.", "ctx_b": "she",
                    "endings": ["eats it.", "bakes it.", "[header] bakes it", "sells it."],
                    "label": 1}).encode() + b"\n"]))


# ----------------------------------------------------------------- models


def tiny_tensors(cfg):
    """HF names and shapes of a tiny Llama, values small and deterministic."""
    C, F, V, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], \
        cfg["num_hidden_layers"]
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = C // H
    shapes = [("model.embed_tokens.weight", [V, C])]
    for l in range(L):
        p = "model.layers.%d." % l
        shapes += [(p + "input_layernorm.weight", [C]), (p + "self_attn.q_proj.weight", [H * D, C]),
                   (p + "self_attn.k_proj.weight", [KV * D, C]),
                   (p + "self_attn.v_proj.weight", [KV * D, C]),
                   (p + "self_attn.o_proj.weight", [C, H * D]),
                   (p + "post_attention_layernorm.weight", [C]),
                   (p + "mlp.gate_proj.weight", [F, C]), (p + "mlp.up_proj.weight", [F, C]),
                   (p + "mlp.down_proj.weight", [C, F])]
    shapes += [("model.norm.weight", [C]), ("lm_head.weight", [V, C])]
    out = []
    for i, (name, shape) in enumerate(shapes):
        n = 1
        for d in shape:
            n *= d
        out.append((name, shape, [((i * 7 + k * 13) % 17 - 8) / 64.0 for k in range(n)]))
    return out


TINY = {"vocab_size": 16, "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 16,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
        "model_type": "llama", "hidden_act": "silu", "architectures": ["LlamaForCausalLM"],
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}


def to_bf16(x):
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    return (b + 0x7FFF + ((b >> 16) & 1)) >> 16


def safetensors_file(tensors, dtype):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, shape, values in tensors:
        if dtype == "F32":
            blob = struct.pack("<%df" % len(values), *values)
        elif dtype == "F16":
            blob = struct.pack("<%de" % len(values), *values)
        else:
            blob = struct.pack("<%dH" % len(values), *[to_bf16(v) for v in values])
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def safetensors(c):
    t = tiny_tensors(TINY)
    for dtype in ("F32", "F16", "BF16"):
        c.add("safetensors", "tiny-" + dtype.lower(), safetensors_file(t, dtype))
    first, second = t[: len(t) // 2], t[len(t) // 2:]
    index = {"metadata": {"total_size": 0}, "weight_map": {}}
    for name, _, _ in first:
        index["weight_map"][name] = "model-00001-of-00002.safetensors"
    for name, _, _ in second:
        index["weight_map"][name] = "model-00002-of-00002.safetensors"
    c.add("safetensors", "sharded", SEP.join([json.dumps(index, indent=2).encode(),
                                              safetensors_file(first, "BF16"),
                                              safetensors_file(second, "BF16")]))


def hf_config(c):
    c.add("hf_config", "tiny", json.dumps(TINY, indent=2))
    llama3 = dict(TINY, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 8192},
                  head_dim=4, attention_bias=True, tie_word_embeddings=True)
    c.add("hf_config", "llama3", json.dumps(llama3, indent=2))
    v5 = dict(TINY, rope_parameters={"rope_theta": 500000.0, "rope_type": "linear",
                                     "factor": 2.0}, initializer_range=0.02, mlp_bias=False)
    c.add("hf_config", "rope-parameters", json.dumps(v5, indent=2))
    tinyllama = {"architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
                 "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
                 "intermediate_size": 5632, "max_position_embeddings": 2048,
                 "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 22,
                 "num_key_value_heads": 4, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
                 "rope_scaling": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
                 "transformers_version": "4.31.0.dev0", "use_cache": True, "vocab_size": 32000}
    c.add("hf_config", "tinyllama-shape", json.dumps(tinyllama, indent=2))


def llama2c_file(version, shared, dim=8, hidden=16, layers=1, heads=2, kv=2, vocab=16, seq=4):
    cfg = [dim, hidden, layers, heads, kv, vocab if (shared or version == 1) else -vocab, seq]
    D = dim // heads
    sizes = {"emb": vocab * dim, "att_norm": layers * dim, "wq": layers * dim * dim,
             "wk": layers * kv * D * dim, "wv": layers * kv * D * dim, "wo": layers * dim * dim,
             "ffn_norm": layers * dim, "w1": layers * hidden * dim, "w2": layers * dim * hidden,
             "w3": layers * hidden * dim, "norm": dim}
    if version == 0:
        order = ["emb", "att_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w2", "w3", "norm"]
        head = struct.pack("<7i", *cfg)
        extra = 2 * seq * D // 2  # freq_cis real and imaginary
    else:
        order = ["att_norm", "ffn_norm", "norm", "emb", "wq", "wk", "wv", "wo", "w1", "w2", "w3"]
        head = struct.pack("<Ii7iB", 0x616B3432, 1, *cfg, 1 if shared else 0)
        head += b"\0" * (256 - len(head))
        extra = 0
    n = sum(sizes[k] for k in order) + extra + (0 if shared else vocab * dim)
    return head + struct.pack("<%df" % n, *[((k * 5) % 11 - 5) / 32.0 for k in range(n)])


def llama2c(c):
    for version in (0, 1):
        for shared in (True, False):
            c.add("llama2c", "tiny-v%d-%s" % (version, "shared" if shared else "separate"),
                  llama2c_file(version, shared))
    c.add("llama2c", "gqa-v1", llama2c_file(1, True, dim=16, heads=4, kv=2, layers=2))
    # The shipped stories260K models' headers (the files are 1 MB): refused
    # for their size, after the header is read.
    c.add("llama2c", "stories260K-head", read("data/models/stories260K/stories260K.bin")[:512])
    c.add("llama2c", "stories260K_v1-head",
          read("data/models/stories260K/stories260K_v1.bin")[:512])


def tokenizer(c):
    c.add("tokenizer", "tok512.model", read("data/tokenizers/tok512.model"))


def checkpoints(c, strata):
    """A tiny model trained one step (optimizer state, tokenizer, recipe) and
    a tiny llama2.c model converted (no tokenizer, no optimizer); each also
    repacked in HDF5's oldest format, whose metadata has no checksums."""
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "text.txt")
        with open(text, "wb") as f:
            f.write(read("data/corpora/tinyshakespeare/input.txt")[:6000])
        recipe = os.path.join(tmp, "tiny.toml")
        with open(recipe, "w") as f:
            f.write("""[run]
name = "tiny"
dir = "%s/run"
threads = 1
[data]
tokenizer = "%s/data/tokenizers/tok512.model"
dataset = "%s/data"
inputs = ["%s"]
val_fraction = 0.0
[model]
hidden_size = 8
intermediate_size = 16
num_hidden_layers = 1
num_attention_heads = 2
num_key_value_heads = 1
tie_word_embeddings = true
[training]
steps = 1
seq_len = 8
micro_batch_size = 1
""" % (tmp, REPO, tmp, text))
        subprocess.run([strata, "train", recipe], check=True, cwd=tmp,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        trained = os.path.join(tmp, "run", "checkpoints", "step_00000001.h5")
        model = os.path.join(tmp, "tiny.bin")
        with open(model, "wb") as f:
            f.write(llama2c_file(0, True))
        converted = os.path.join(tmp, "converted.h5")
        subprocess.run([strata, "convert", "llama2c", model, converted], check=True, cwd=tmp,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for name, path in (("trained", trained), ("converted", converted)):
            c.add("checkpoint", name + ".h5", open(path, "rb").read())
            if shutil.which("h5repack"):
                old = os.path.join(tmp, name + "-v0.h5")
                subprocess.run(["h5repack", "--low=0", "--high=1", path, old], check=True)
                c.add("checkpoint", name + "-oldest-format.h5", open(old, "rb").read())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--strata", help="a strata binary, for the checkpoint seeds")
    ap.add_argument("--out", default=os.path.join(REPO, "fuzz", "corpus"))
    a = ap.parse_args()
    c = Corpus(a.out)
    strata = os.path.abspath(a.strata) if a.strata else None
    recipes(c, strata)
    for make in (shards, sft, tasks, safetensors, hf_config, llama2c, tokenizer):
        make(c)
    if strata:
        checkpoints(c, strata)
    else:
        print("make_corpus: no --strata: checkpoint and resolved-recipe seeds left as they are",
              file=sys.stderr)
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(a.out) for f in fs)
    print("make_corpus: %s, %d bytes" % (a.out, total))


if __name__ == "__main__":
    main()
