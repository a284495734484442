"""bench.md: one table per item, each figure beside its target and a pass/fail verdict."""
from __future__ import annotations

from typing import Any

MIB = 2**20


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("pass" if ok else "FAIL")


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join("-" if c is None else str(c) for c in row) + " |" for row in rows]
    return out + [""]


def _throughput(item: dict[str, Any]) -> list[str]:
    lines = [f"## 1. LLM-bound throughput (L = {item['latency']} s, concurrency {item['concurrency']}, "
             f"{item['memories']} conversations)", "",
             "ratio = stage wall / (calls x L / concurrency); target <= "
             f"{item['stages'][0]['target'] if item['stages'] else '-'} for every LLM stage.", ""]
    rows = [[s["stage"], s["calls"], f"{s['stage_wall_seconds']:.2f}", f"{s['ideal_seconds']:.2f}",
             s["ratio"], f"{s['process_wall_seconds']:.2f}", s["ratio_process"], f"<= {s['target']}",
             _verdict(s["passed"])] for s in item["stages"]]
    return lines + _table(["stage", "calls", "stage wall s", "bound s", "ratio", "process wall s",
                           "ratio (process)", "target", "result"], rows)


def _speedup(item: dict[str, Any]) -> list[str]:
    lo, hi = item["concurrency_low"], item["concurrency_high"]
    lines = [f"### Speed-up on {item['memory_id']}: concurrency {lo} vs {hi} (L = {item['latency']} s)", ""]
    rows = [[s["stage"], s["calls_low"], f"{s[f'wall_c{lo}']:.1f}", f"{s[f'wall_c{hi}']:.1f}", s["speedup"],
             s["ideal_speedup"]] for s in item["stages"]]
    rows.append(["LLM stages", "", f"{item['llm_stages_wall_low']:.1f}", f"{item['llm_stages_wall_high']:.1f}",
                 item["llm_stages_speedup"], ""])
    target = item.get("target_pipeline_speedup")
    how = item.get("pipeline", "one process per stage")
    span = "01-09" if how.startswith("one process (") else "01-08"
    rows.append([f"whole pipeline {span} ({how})", "", f"{item['pipeline_wall_low']:.1f}",
                 f"{item['pipeline_wall_high']:.1f}", item["pipeline_speedup"],
                 f">= {target}: {_verdict(item.get('passed'))}" if target else ""])
    return lines + _table(["stage", "calls", f"wall s (c={lo})", f"wall s (c={hi})", "speed-up",
                           "ideal speed-up (pipeline: target)"], rows)


def _retrieval(item: dict[str, Any]) -> list[str]:
    t = item["targets"]
    labels = {"pipeline": "embedding cache as stage 04 left it (as in `make locomo`)",
              "no_cache": "no embedding cache (every query text through the model)"}
    head = item["variants"][item["headline"]]
    lines = [f"## 2. Retrieval latency (06_retrieve on {item['memory_id']}, {item['questions']} questions, "
             f"{head['embedding_model']}, torch threads {head['torch_threads']})", ""]
    rows = []
    for name, v in item["variants"].items():
        lat, emb = v["latency"], v["embedding"]
        rows.append([labels[name], _ms(lat["p50"]), _ms(lat["p95"]), f"{_ms(lat['mean'])} / {_ms(lat['max'])}",
                     f"{emb['share_of_time']}", emb["model_texts_per_question"],
                     f"{_ms(v['non_embedding']['p50'])} / {_ms(v['non_embedding']['p95'])}",
                     f"{_verdict(v['passed']['p50'])} / {_verdict(v['passed']['p95'])}"])
    run = item["full_run_06_seconds_all"]
    rows.append(["the full run's 06 process, all questions (rows' `seconds`, bridge calls' latency included)",
                 _ms(run["p50"]), _ms(run["p95"]), f"{_ms(run['mean'])} / {_ms(run['max'])}", "", "", "", ""])
    own = item.get("full_run_06_retrieval_seconds_all")
    if own:  # the same rows without the bridge calls' endpoint latency: the retrieval's own time
        rows.append(["the full run's 06 process, all questions, without the bridge calls",
                     _ms(own["p50"]), _ms(own["p95"]), f"{_ms(own['mean'])} / {_ms(own['max'])}", "", "", "",
                     f"{_verdict(own['p50'] <= t['p50'])} / {_verdict(own['p95'] <= t['p95'])}"])
    setup = ", ".join(f"{k} {v:.2f} s" for k, v in head["setup"].items())
    return lines + _table(["variant", f"p50 (<= {_ms(t['p50'])})", f"p95 (<= {_ms(t['p95'])})", "mean / max",
                           "embedding share", "texts to the model per q.", "p50 / p95 without embedding",
                           "result p50 / p95"], rows) + [f"Once per process, excluded: {setup}.", ""]


def _warm(item: dict[str, Any]) -> list[str]:
    rows = [["LLM calls", item["llm_calls"], "0", _verdict(item["passed"])],
            ["wall time", f"{item['wall_seconds']:.1f} s", "", f"cold run {item['cold_wall_seconds']:.1f} s"],
            ["peak RSS", f"{item['peak_rss_bytes'] / MIB:.0f} MiB", "", ""]]
    return [f"## 3. Warm rerun ({item['via']}, same config and caches)", ""] + \
        _table(["figure", "measured", "target", "result"], rows)


def _memory(item: dict[str, Any], full_run: dict[str, Any]) -> list[str]:
    proc = {s["stage"]: s["process"] for s in full_run["stages"]}
    rows = [[s["stage"], f"{proc[s['stage']]['wall_seconds']:.1f}",
             f"{proc[s['stage']]['user_seconds'] + proc[s['stage']]['system_seconds']:.1f}",
             f"{s['peak_rss_bytes'] / MIB:.0f}",
             f"{s['peak_rss_excl_weights_bytes'] / MIB:.0f}" if s["loads_model"] else ""] for s in item["stages"]]
    lines = ["## 4. Peak memory (RSS) of the full run", "",
             f"Model weights ({item['model']['model']}): {item['model_weight_bytes'] / MIB:.1f} MiB, "
             "subtracted from the stages that load the model.", ""]
    summary = [["peak RSS, weights excluded", f"{item['peak_rss_excl_weights_bytes'] / MIB:.0f} MiB "
                f"({item['peak_rss_excl_weights_stage']})", f"< {item['target_bytes'] / MIB:.0f} MiB",
                _verdict(item["passed"])],
               ["peak RSS, raw", f"{item['peak_rss_bytes'] / MIB:.0f} MiB ({item['peak_rss_stage']})", "", ""]]
    return lines + _table(["figure", "measured", "target", "result"], summary) + \
        [f"The cold full run, stage by stage ({full_run['wall_seconds']:.0f} s in all):", ""] + \
        _table(["stage", "wall s", "CPU s (user+sys)", "peak RSS MiB", "without weights MiB"], rows)


def render_markdown(result: dict[str, Any]) -> str:
    b, m, items = result["bench"], result["machine"], result["items"]
    lines = ["# make bench", "",
             f"{b['started_utc']} to {b['finished_utc']} ({b['wall_seconds']:.0f} s); {m['cpu']}, "
             f"{m['cpus_usable']} usable cores, load average {m['load_average']} at start, "
             f"{b['load_average_end']} at end; code {m['code'].get('commit')}"
             f"{' (dirty)' if m['code'].get('dirty') else ''}; data {result['data']['path']}.", ""]
    if "throughput" in items:
        lines += _throughput(items["throughput"])
    if "speedup" in items:
        lines += _speedup(items["speedup"])
    if "retrieval" in items:
        lines += _retrieval(items["retrieval"])
    if "warm" in items:
        lines += _warm(items["warm"])
    if "memory" in items:
        lines += _memory(items["memory"], b["full_run"])
    if "gateway" in items:
        lines += _gateway(items["gateway"])
    return "\n".join(lines)


def _gateway(item: dict[str, Any]) -> list[str]:
    o, i = item["overhead"], item["ingestion"]
    direct, via = o["direct"]["mean_latency"], o["gateway"]["mean_latency"]
    rows = [["mean latency per call, straight through the client", f"{direct * 1000:.1f} ms"],
            ["mean latency per call, through the gateway (openai SDK)", f"{via * 1000:.1f} ms"],
            ["gateway overhead per call", f"{o['overhead_per_call_seconds'] * 1000:.1f} ms"]]
    if "server_per_call_seconds" in o:
        rows.append(["of which the gateway's own request handling", f"{o['server_per_call_seconds'] * 1000:.1f} ms"])
    if "skipped" in i:
        rows.append(["LangMem ingestion ratio", f"not measured: {i['skipped']}"])
    else:
        rows.append(["LangMem ingestion: wall / (calls x latency / concurrency)",
                     f"{i['wall_seconds']:.1f} s / ({i['calls']} x {i['latency']} s / {i['concurrency']}) "
                     f"= {i['ratio']}"])
    return [f"## 5. Gateway ({o['calls']} distinct calls at concurrency {o['concurrency']})", ""] + \
        _table(["figure", "measured"], rows)
