"""A Llama-shaped decoder built with `tvm.relax.frontend.nn`, for the offload
benchmark: no weights, no torch.

The module structure follows how MLC-LLM lays out its Llama models (a fused
`qkv_proj` and `gate_up_proj` per layer, RMSNorm without bias, a separate
`lm_head`), so parameter names read `model.layers.3.mlp.gate_up_proj.weight`.
It is a prefill without a KV cache: attention is written out (scores,
causal mask, softmax, weighted sum), rotary embeddings are computed from the
positions. The exported entry function is `forward(input_ids, <weights>)`
with `num_input` 1.

    .venv/bin/python scripts/llama_nn.py --layers 8 --out /tmp/llama7b_l8.json

writes the module as TVM JSON (weights are parameters, so the file is small:
the IR only). Defaults: Llama-2-7B's width (hidden 4096, intermediate 11008,
32 heads, 32 KV heads, vocabulary 32000, float16), prefill 128.
"""


import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tvm import relax
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op
from tvm.relax.frontend.nn.core import wrap_nested


@dataclass(frozen=True)
class LlamaShape:
    """The decoder's sizes (Llama-2-7B's by default)."""

    hidden: int = 4096
    intermediate: int = 11008
    heads: int = 32
    kv_heads: int = 32
    vocab: int = 32000
    layers: int = 32
    dtype: str = "float16"
    seq: int = 128
    rope_theta: float = 10000.0
    eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def parameter_bytes(self) -> int:
        """Bytes of all weights, from the shapes (what the exported module's parameters hold)."""
        d, f, v = self.hidden, self.intermediate, self.vocab
        qkv = d * (self.heads + 2 * self.kv_heads) * self.head_dim
        per_layer = qkv + self.heads * self.head_dim * d + 2 * f * d + f * d + 2 * d
        elements = v * d + self.layers * per_layer + d + d * v
        return elements * (2 if self.dtype == "float16" else 4)


def _rotate(x: nn.Tensor, cos: nn.Tensor, sin: nn.Tensor, half: int) -> nn.Tensor:
    """Rotary embedding of `x` [b, heads, s, d]: x*cos + rotate_half(x)*sin."""
    first, second = op.split(x, 2, axis=-1)
    rotated = op.concat([op.negative(second), first], dim=-1)
    return op.add(op.multiply(x, cos), op.multiply(rotated, sin))


class Attention(nn.Module):
    def __init__(self, s: LlamaShape) -> None:
        self.s = s
        width = (s.heads + 2 * s.kv_heads) * s.head_dim
        self.qkv_proj = nn.Linear(s.hidden, width, bias=False, dtype=s.dtype)
        self.o_proj = nn.Linear(s.heads * s.head_dim, s.hidden, bias=False, dtype=s.dtype)

    def forward(self, x: nn.Tensor, cos: nn.Tensor, sin: nn.Tensor, mask: nn.Tensor) -> nn.Tensor:
        s = self.s
        b, t, d = 1, s.seq, s.head_dim
        qkv = op.reshape(self.qkv_proj(x), (b, t, s.heads + 2 * s.kv_heads, d))
        q, k, v = op.split(qkv, [s.heads, s.heads + s.kv_heads], axis=2)
        q, k, v = (op.permute_dims(y, [0, 2, 1, 3]) for y in (q, k, v))  # [b, heads, t, d]
        q, k = _rotate(q, cos, sin, d // 2), _rotate(k, cos, sin, d // 2)
        if s.kv_heads != s.heads:
            repeat = s.heads // s.kv_heads
            k, v = (op.repeat(y, repeat, axis=1) for y in (k, v))
        scores = op.matmul(q, op.permute_dims(k, [0, 1, 3, 2]))
        scores = op.add(op.multiply(scores, nn.Tensor.from_const(_const(1.0 / math.sqrt(d), s.dtype))), mask)
        probs = op.softmax(scores, axis=-1)
        out = op.permute_dims(op.matmul(probs, v), [0, 2, 1, 3])
        return self.o_proj(op.reshape(out, (b, t, s.heads * d)))


class MLP(nn.Module):
    def __init__(self, s: LlamaShape) -> None:
        self.gate_up_proj = nn.Linear(s.hidden, 2 * s.intermediate, bias=False, dtype=s.dtype)
        self.down_proj = nn.Linear(s.intermediate, s.hidden, bias=False, dtype=s.dtype)

    def forward(self, x: nn.Tensor) -> nn.Tensor:
        gate, up = op.split(self.gate_up_proj(x), 2, axis=-1)
        return self.down_proj(op.multiply(op.silu(gate), up))


class DecoderLayer(nn.Module):
    def __init__(self, s: LlamaShape) -> None:
        self.self_attn = Attention(s)
        self.mlp = MLP(s)
        self.input_layernorm = nn.RMSNorm(s.hidden, -1, s.eps, bias=False, dtype=s.dtype)
        self.post_attention_layernorm = nn.RMSNorm(s.hidden, -1, s.eps, bias=False, dtype=s.dtype)

    def forward(self, x: nn.Tensor, cos: nn.Tensor, sin: nn.Tensor, mask: nn.Tensor) -> nn.Tensor:
        x = op.add(x, self.self_attn(self.input_layernorm(x), cos, sin, mask))
        return op.add(x, self.mlp(self.post_attention_layernorm(x)))


class Model(nn.Module):
    def __init__(self, s: LlamaShape) -> None:
        self.embed_tokens = nn.Embedding(s.vocab, s.hidden, dtype=s.dtype)
        self.layers = nn.ModuleList([DecoderLayer(s) for _ in range(s.layers)])
        self.norm = nn.RMSNorm(s.hidden, -1, s.eps, bias=False, dtype=s.dtype)

    def forward(self, x: nn.Tensor, cos: nn.Tensor, sin: nn.Tensor, mask: nn.Tensor) -> nn.Tensor:
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    def __init__(self, s: LlamaShape) -> None:
        self.s = s
        self.model = Model(s)
        self.lm_head = nn.Linear(s.hidden, s.vocab, bias=False, dtype=s.dtype)

    def forward(self, input_ids: nn.Tensor) -> nn.Tensor:
        s = self.s
        cos, sin = _rope_tables(s)
        mask = _causal_mask(s)
        x = self.model.embed_tokens(input_ids)
        return self.lm_head(self.model(x, cos, sin, mask))


def _const(value: float, dtype: str) -> Any:
    import numpy as np

    return np.array(value, dtype=dtype)


def _rope_tables(s: LlamaShape) -> tuple[nn.Tensor, nn.Tensor]:
    """cos and sin of position x frequency, [1, 1, seq, head_dim], computed in the graph."""
    half = s.head_dim // 2
    positions = op.reshape(op.arange(0, s.seq, dtype="float32"), (s.seq, 1))
    exponents = op.arange(0, half, dtype="float32")
    scale = -math.log(s.rope_theta) / half
    inv_freq = op.reshape(op.exp(op.multiply(exponents, nn.Tensor.from_const(_const(scale, "float32")))), (1, half))
    freqs = op.multiply(positions, inv_freq)
    angles = op.reshape(op.concat([freqs, freqs], dim=-1), (1, 1, s.seq, s.head_dim))
    cos = wrap_nested(relax.op.cos(angles._expr), "cos")
    sin = wrap_nested(relax.op.sin(angles._expr), "sin")
    return op.astype(cos, s.dtype), op.astype(sin, s.dtype)


def _causal_mask(s: LlamaShape) -> nn.Tensor:
    """0 on and below the diagonal, the dtype's lowest value above, [1, 1, seq, seq]."""
    lowest = -65504.0 if s.dtype == "float16" else -3.0e38
    full = op.full((s.seq, s.seq), nn.Tensor.from_const(_const(lowest, s.dtype)), dtype=s.dtype)
    return op.reshape(op.triu(full, 1), (1, 1, s.seq, s.seq))


def build(shape: LlamaShape) -> Any:
    """The decoder as a Relax IRModule with entry function `forward`."""
    model = LlamaForCausalLM(shape)
    spec = {"forward": {"input_ids": nn.spec.Tensor([1, shape.seq], "int32")}}
    mod, _ = model.export_tvm(spec=spec)
    return mod


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--intermediate", type=int, default=11008)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--out", type=Path, required=True, help="where to write the module (TVM JSON)")
    args = parser.parse_args(argv)
    shape = LlamaShape(args.hidden, args.intermediate, args.heads, args.kv_heads, args.vocab, args.layers,
                       args.dtype, args.seq)
    import tvm

    args.out.write_text(tvm.ir.save_json(build(shape)))
    sys.stderr.write(f"wrote {args.out} ({shape.parameter_bytes() / 1e9:.2f} GB of parameters)\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
