"""ONNX Runtime for a sentence-transformers model: the optional ``embedding.runtime: onnx``.

sentence-transformers' own ``backend="onnx"`` needs ``optimum-onnx``, whose only release requires
transformers < 4.58 while this project pins transformers 5 (docs/scale.md "Embedding throughput"). So the
harness does the same thing itself: the loaded model's transformer, with mean pooling folded in, is
exported once with ``torch.onnx.export`` (no network: the weights are the local ones), optionally
quantized to int8 (``onnxruntime.quantization.quantize_dynamic``), and run by ONNX Runtime with the
model's own ``tokenizer.json``. Only models whose sentence-transformers pipeline is
Transformer -> mean Pooling (-> Normalize) are accepted; anything else fails with one line.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from common.core import progress

log = logging.getLogger(__name__)

# Bump when the exported graph changes (the file name carries it, so an old export is not reused).
EXPORT_VERSION = 1
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def check_pipeline(model_dir: Path) -> None:
    """Refuse models this exporter would get wrong (anything but mean pooling over a transformer)."""
    modules = json.loads((model_dir / "modules.json").read_text(encoding="utf-8"))
    kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
    if kinds[:2] != ["Transformer", "Pooling"] or any(k not in ("Transformer", "Pooling", "Normalize") for k in kinds):
        raise ValueError(f"{model_dir}/modules.json: runtime onnx supports Transformer -> Pooling "
                         f"(-> Normalize) models, not {kinds}")
    pooling = json.loads((model_dir / modules[1]["path"] / "config.json").read_text(encoding="utf-8"))
    if not pooling.get("pooling_mode_mean_tokens"):
        raise ValueError(f"{model_dir}/{modules[1]['path']}/config.json: runtime onnx supports mean pooling only")


def export(st_model: Any, out: Path, quantized: bool) -> Path:
    """Write the ONNX graph (inputs: token ids, mask, type ids; output: mean-pooled embedding)."""
    import torch

    class MeanPooled(torch.nn.Module):
        def __init__(self, transformer: Any) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.transformer(input_ids=input_ids, attention_mask=attention_mask,
                                      token_type_ids=token_type_ids).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    out.parent.mkdir(parents=True, exist_ok=True)
    fp32 = out.with_name(out.name.replace(".int8", "")) if quantized else out
    if not fp32.exists():
        tok = st_model.tokenizer(["a short probe", "a second, somewhat longer probe sentence"], padding=True,
                                 return_tensors="pt")
        example = tuple(tok[k] if k in tok else torch.zeros_like(tok["input_ids"]) for k in INPUTS)
        axes: dict[str, dict[int, str]] = {k: {0: "batch", 1: "tokens"} for k in INPUTS}
        axes["sentence_embedding"] = {0: "batch"}
        tmp = fp32.with_suffix(".part")
        with torch.no_grad():
            # The TorchScript exporter: the dynamo one needs onnxscript, not installed here.
            torch.onnx.export(MeanPooled(st_model[0].auto_model).eval(), example, str(tmp), input_names=list(INPUTS),
                              output_names=["sentence_embedding"], dynamic_axes=axes,
                              opset_version=17, dynamo=False)
        tmp.replace(fp32)
    if quantized and not out.exists():
        from onnxruntime.quantization import QuantType, quantize_dynamic

        tmp = out.with_suffix(".part")
        quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QInt8)
        tmp.replace(out)
    return out


class OnnxEncoder:
    """Tokenize with the model's tokenizer.json, run the graph, return raw (unnormalized) rows."""

    def __init__(self, model_dir: Path, onnx_file: Path, max_length: int, batch_size: int) -> None:
        import onnxruntime

        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length)
        pad_id = self.tokenizer.token_to_id("[PAD]") or 0
        self.tokenizer.enable_padding(pad_id=pad_id, pad_token="[PAD]")
        opts = onnxruntime.SessionOptions()
        opts.log_severity_level = 3
        self.session = onnxruntime.InferenceSession(str(onnx_file), opts, providers=["CPUExecutionProvider"])
        self.batch_size = max(1, int(batch_size))

    def encode(self, texts: list[str]) -> np.ndarray:
        # Longest first, as sentence-transformers does: batches of similar length pad little.
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.zeros((len(texts), 0), dtype=np.float32)
        rows: dict[int, np.ndarray] = {}
        starts = range(0, len(order), self.batch_size)
        for start in progress.bar(starts, desc="encoding batches", enabled=len(texts) >= progress.MIN_ENCODE_TEXTS):
            idx = order[start:start + self.batch_size]
            enc = self.tokenizer.encode_batch([texts[i] for i in idx])
            feed = {"input_ids": np.array([e.ids for e in enc], dtype=np.int64),
                    "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
                    "token_type_ids": np.array([e.type_ids for e in enc], dtype=np.int64)}
            (vecs,) = self.session.run(None, feed)
            rows.update(zip(idx, np.asarray(vecs, dtype=np.float32)))
        if rows:
            out = np.stack([rows[i] for i in range(len(texts))])
        return out
