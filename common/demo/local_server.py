"""A small OpenAI-compatible chat endpoint over a local transformers model (the offline demo).

The demo's model sits behind the same HTTP API as every other backend, so the pipeline keeps
its one client path (``common.core.llm.LLMClient``). ``common.demo.local_llm`` starts and stops this
server; run it by hand with ``python -m common.demo.local_server --gguf FILE --port 8765``.

What it speaks: ``GET /health``, ``GET /v1/models`` and ``POST /v1/chat/completions`` (no
streaming, one choice; ``max_tokens``, ``temperature``, ``top_p``, ``seed``, ``stop``).
``response_format`` is honoured by constrained decoding with llguidance: ``json_object`` allows
any JSON object, ``json_schema`` exactly the schema, both in compact form (no whitespace between
tokens: a 135M model otherwise spends its few tokens per second on indentation). Temperature 0 is
greedy decoding; otherwise sampling with ``seed``.

Requests are served one at a time: on two CPU cores a second concurrent generation only
slows both down. The model is loaded on the first chat request, so a rerun whose every call is
answered from the harness's cache never pays for loading it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # llguidance is optional at run time and imported where it is used
    from llguidance._lib import JsonCompileOptions

log = logging.getLogger("local_server")

# Compact JSON unless a schema asks otherwise through its own "x-guidance" options.
JSON_DEFAULTS: JsonCompileOptions = {"whitespace_flexible": False}


class RequestError(ValueError):
    """A request the server cannot serve; sent back as an OpenAI-style 400 error."""

    def __init__(self, message: str, code: str = "invalid_request", param: Optional[str] = None):
        super().__init__(message)
        self.code, self.param = code, param


@dataclass(frozen=True)
class Generation:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" | "length"


# --------------------------------------------------------------------------- response_format
def json_schema_of(response_format: Any) -> Optional[dict[str, Any]]:
    """The JSON schema a ``response_format`` asks for, or None for free text."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise RequestError("response_format must be an object", param="response_format")
    kind = response_format.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise RequestError("response_format.json_schema.schema must be an object",
                               param="response_format.json_schema.schema")
        return schema
    raise RequestError(f"response_format.type {kind!r} is not text, json_object or json_schema",
                       param="response_format.type")


def compile_grammar(schema: dict[str, Any]) -> str:
    """An llguidance grammar for a JSON schema; ``RequestError`` names what is unsupported."""
    from llguidance import LLMatcher

    try:
        grammar = LLMatcher.grammar_from_json_schema(schema, defaults=JSON_DEFAULTS)
    except ValueError as exc:
        raise RequestError(f"response_format: {exc}", param="response_format") from None
    is_error, messages = LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error:
        raise RequestError(f"response_format: unsupported schema: {' '.join(messages)}",
                           param="response_format")
    return grammar


# --------------------------------------------------------------------------- model
def converted_dir(gguf: Path, cache_dir: Path) -> Path:
    """Where the dequantized copy of ``gguf`` lives (named by the file's content hash)."""
    digest = hashlib.sha256()
    with gguf.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return cache_dir / f"{gguf.stem}-{digest.hexdigest()[:12]}"


def load_model(gguf: Path, cache_dir: Optional[Path]) -> tuple[Any, Any]:
    """(tokenizer, model) for a GGUF chat model, in fp32 on the CPU.

    transformers dequantizes a GGUF on every load (20-40 s on two cores); the result is saved
    once as an ordinary safetensors folder under ``cache_dir`` that then loads in seconds.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = converted_dir(gguf, cache_dir) if cache_dir else None
    if target and (target / "config.json").exists():
        return AutoTokenizer.from_pretrained(target), AutoModelForCausalLM.from_pretrained(target).eval()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name).eval()
    if target:
        # save_pretrained refuses a model that still names its GGUF quantizer; the weights are
        # already plain fp32 tensors, so the quantization record is dropped before saving.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        for stale in target.parent.glob(f"{target.name}.tmp-*"):  # left by a conversion that was killed
            shutil.rmtree(stale, ignore_errors=True)
        tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)  # atomic: a half-written folder is never taken for a finished one
    return tokenizer, model


class ChatModel:
    """Chat completions from one causal LM, with optional JSON-schema constrained decoding."""

    def __init__(self, gguf: Path, cache_dir: Optional[Path], threads: int):
        self.gguf, self.cache_dir, self.threads = gguf, cache_dir, threads
        self._lock = threading.Lock()
        self._loaded: Optional[tuple[Any, Any, Any]] = None
        self.load_seconds: Optional[float] = None

    @property
    def loaded(self) -> bool:
        return self._loaded is not None

    def _load(self) -> tuple[Any, Any, Any]:
        if self._loaded is None:
            import llguidance.hf
            import torch

            t0 = time.perf_counter()
            torch.set_num_threads(self.threads)
            tokenizer, model = load_model(self.gguf, self.cache_dir)
            self._loaded = (tokenizer, model, llguidance.hf.from_tokenizer(tokenizer))
            self.load_seconds = round(time.perf_counter() - t0, 2)
            log.info("model loaded in %.1fs", self.load_seconds)
        return self._loaded

    def context_window(self) -> int:
        return int(self._load()[1].config.max_position_embeddings)

    def generate(self, messages: list[dict[str, Any]], *, max_tokens: int, temperature: float,
                 top_p: Optional[float], seed: Optional[int], grammar: Optional[str],
                 stop: tuple[str, ...] = ()) -> Generation:
        with self._lock:  # one generation at a time (see module docstring)
            return self._generate(messages, max_tokens, temperature, top_p, seed, grammar, stop)

    def _generate(self, messages: list[dict[str, Any]], max_tokens: int, temperature: float,
                  top_p: Optional[float], seed: Optional[int], grammar: Optional[str],
                  stop: tuple[str, ...]) -> Generation:
        import torch
        from transformers import LogitsProcessorList

        tokenizer, model, ll_tokenizer = self._load()
        inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                               return_dict=True)
        n_prompt = int(inputs["input_ids"].shape[1])
        window = int(model.config.max_position_embeddings)
        if n_prompt + max_tokens > window:
            raise RequestError(f"prompt ({n_prompt} tokens) + max_tokens ({max_tokens}) exceeds the "
                               f"model's context window of {window} tokens", code="context_length_exceeded",
                               param="messages")
        processors = LogitsProcessorList()
        if grammar is not None:
            processors.append(GrammarMask(ll_tokenizer, grammar, n_prompt))
        kwargs: dict[str, Any] = {"max_new_tokens": max_tokens, "logits_processor": processors,
                                  "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.eos_token_id}
        if stop:
            kwargs.update(stop_strings=list(stop), tokenizer=tokenizer)
        if temperature > 0:
            torch.manual_seed(seed if seed is not None else 0)
            kwargs.update(do_sample=True, temperature=temperature, top_p=top_p if top_p is not None else 1.0)
        else:
            kwargs.update(do_sample=False)
        with torch.inference_mode():
            out = model.generate(**inputs, **kwargs)
        new = out[0, n_prompt:].tolist()
        eos = bool(new) and new[-1] == tokenizer.eos_token_id
        text = tokenizer.decode(new, skip_special_tokens=True)
        cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
        if cut >= 0:  # as OpenAI does: the stop sequence ends the reply and is not part of it
            text = text[:cut]
        return Generation(text, n_prompt, len(new) - int(eos), "stop" if eos or cut >= 0 else "length")


class GrammarMask:
    """A transformers logits processor: every token the grammar forbids next gets -inf.

    llguidance computes the allowed-token bitmask from the grammar and the tokens generated
    so far; one instance serves one request (it consumes the tokens as they are chosen).
    """

    def __init__(self, ll_tokenizer: Any, grammar: str, n_prompt: int):
        from llguidance import LLMatcher

        self.matcher = LLMatcher(ll_tokenizer, grammar)
        if self.matcher.is_error():
            raise RequestError(f"response_format: {self.matcher.get_error()}", param="response_format")
        self.n_prompt = n_prompt

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import numpy as np
        import torch

        if input_ids.shape[1] > self.n_prompt:  # the token chosen at the previous step
            self.matcher.consume_token(int(input_ids[0, -1]))
        if self.matcher.is_error():  # only if a token outside the previous mask was chosen
            raise RuntimeError(f"grammar matcher: {self.matcher.get_error()}")
        bits = np.unpackbits(np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
        allowed = np.zeros(scores.shape[-1], dtype=bool)  # logits may be wider than the vocabulary
        n = min(len(bits), scores.shape[-1])
        allowed[:n] = bits[:n].astype(bool)
        scores[:, torch.from_numpy(~allowed)] = float("-inf")
        return scores


# --------------------------------------------------------------------------- HTTP
def _error(message: str, code: str, param: Optional[str] = None, type_: str = "invalid_request_error") -> dict:
    return {"error": {"message": message, "type": type_, "code": code, "param": param}}


def parse_chat_request(body: Any, default_max_tokens: int) -> dict[str, Any]:
    """Check a chat request and return the generation arguments, or raise ``RequestError``."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in messages
    ):
        raise RequestError("messages must be a non-empty list of {role, content} with string content",
                           param="messages")
    if body.get("stream"):
        raise RequestError("stream=true is not supported by this server", param="stream")
    if body.get("n", 1) != 1:
        raise RequestError("only n=1 is supported", param="n")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    max_tokens = default_max_tokens if max_tokens is None else max_tokens
    temperature = body.get("temperature", 1.0)
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise RequestError("max_tokens must be a positive integer", param="max_tokens")
    if not isinstance(temperature, (int, float)) or temperature < 0:
        raise RequestError("temperature must be a number >= 0", param="temperature")
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or len(stop) > 4 or not all(isinstance(x, str) and x for x in stop):
        raise RequestError("stop must be a non-empty string or a list of at most 4 of them", param="stop")
    schema = json_schema_of(body.get("response_format"))
    return {"messages": messages, "max_tokens": max_tokens, "temperature": float(temperature),
            "top_p": body.get("top_p"), "seed": body.get("seed"), "stop": tuple(stop),
            "grammar": compile_grammar(schema) if schema is not None else None}


class _Handler(BaseHTTPRequestHandler):
    server: "LocalServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet access log
        log.debug("%s " + format, self.client_address[0], *args)

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?")[0].rstrip("/")
        if path in ("/health", "/v1/health"):
            self._send(200, {"status": "ok", "model": self.server.model_name,
                             "loaded": self.server.model.loaded, "load_seconds": self.server.model.load_seconds})
        elif path == "/v1/models":
            self._send(200, {"object": "list", "data": [
                {"id": self.server.model_name, "object": "model", "created": 0, "owned_by": "local"}]})
        else:
            self._send(404, _error(f"no route {path}", "not_found"))

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?")[0].rstrip("/")
        if path != "/v1/chat/completions":
            self._send(404, _error(f"no route {path}", "not_found"))
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null")
        except (ValueError, json.JSONDecodeError):
            self._send(400, _error("request body is not valid JSON", "invalid_json"))
            return
        try:
            args = parse_chat_request(body, self.server.default_max_tokens)
            t0 = time.perf_counter()
            gen = self.server.model.generate(**args)
        except RequestError as exc:
            self._send(400, _error(str(exc), exc.code, exc.param))
            return
        except Exception as exc:  # noqa: BLE001 - a server must answer, not die; the client retries 5xx
            log.exception("generation failed")
            self._send(500, _error(f"generation failed: {type(exc).__name__}: {exc}", "server_error",
                                   type_="server_error"))
            return
        log.info("chat: %d prompt + %d completion tokens in %.1fs (%s, %s)", gen.prompt_tokens,
                 gen.completion_tokens, time.perf_counter() - t0, gen.finish_reason,
                 "constrained" if args["grammar"] else "free")
        self._send(200, {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": self.server.model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": gen.text},
                         "finish_reason": gen.finish_reason, "logprobs": None}],
            "usage": {"prompt_tokens": gen.prompt_tokens, "completion_tokens": gen.completion_tokens,
                      "total_tokens": gen.prompt_tokens + gen.completion_tokens},
        })


class LocalServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], model: ChatModel, model_name: str, default_max_tokens: int):
        super().__init__(address, _Handler)
        self.model, self.model_name, self.default_max_tokens = model, model_name, default_max_tokens


def _exit_with_parent(parent_pid: int) -> None:
    """Exit when the process that started us is gone (killed without cleaning up)."""
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    log.warning("parent process %d is gone; exiting", parent_pid)
    logging.shutdown()
    os._exit(0)  # at once: a generation still running in a handler thread is abandoned, not joined


def main(argv: Optional[list[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gguf", required=True, type=Path, help="GGUF chat model file")
    p.add_argument("--model-name", default=None, help="the id served under /v1/models (default: file stem)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--cache-dir", type=Path, default=None, help="keep a dequantized copy here (fast reloads)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: see common.demo.local_llm)")
    p.add_argument("--max-tokens", type=int, default=512, help="max_tokens of requests that set none")
    p.add_argument("--preload", action="store_true", help="load the model before serving")
    p.add_argument("--parent-pid", type=int, default=None, help="exit when this process is gone")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for var, value in (("TRANSFORMERS_VERBOSITY", "error"), ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
                       ("TOKENIZERS_PARALLELISM", "false")):
        os.environ.setdefault(var, value)
    if not args.gguf.is_file():
        raise SystemExit(f"error: model file not found: {args.gguf}")
    model = ChatModel(args.gguf, args.cache_dir, max(1, args.threads))
    if args.preload:
        model.context_window()
    server = LocalServer((args.host, args.port), model, args.model_name or args.gguf.stem, args.max_tokens)
    if args.parent_pid:
        threading.Thread(target=_exit_with_parent, args=(args.parent_pid,), daemon=True).start()
    log.info("serving %s on http://%s:%d/v1", server.model_name, args.host, args.port)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
