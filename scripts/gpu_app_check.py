"""The app served as a user serves it, driven through its API: `python app.py` on a free loopback port, then one
`/compare` call per configuration (the app's default lanes: plain decoding, EAGLE, POSS-2) through gradio_client,
each after an untimed warm-up call of the same configuration (model loads, first-call kernels). From each answer it
reads every lane's identity badge (`identical_to_plain`), status (stop reason, error, timed out) and tokens/s, and
writes them as JSON and markdown.

A configuration is a precision (`float32`, `bfloat16`, `float16`, `auto`) or a quantization (`8bit`, `4bit`, sent as
/compare's `quantization` parameter where this checkout's /compare takes one; else the row says it was not driven).

    python scripts/gpu_app_check.py --out results/gpu_check/app                          # bfloat16, float16, 4bit
    python scripts/gpu_app_check.py --preset tiny-random --configs float32 --out /tmp/app   # a CPU smoke run

Needs gradio and gradio_client (requirements.txt). Exit code 0 when every call answered with no lane error, 1
otherwise, 2 when the app could not be served.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from server_harness import Server  # noqa: E402  (the same loopback server the public-server cases start)

from poss_core.models.presets import DEFAULT_PRESET  # noqa: E402

PROMPT = "Explain in three sentences why the sky is blue."
PRECISIONS = ("auto", "float32", "bfloat16", "float16")
QUANTIZATIONS = ("8bit", "4bit")


def compare_parameters(client) -> set[str]:
    """The parameter names /compare takes on this server."""
    info = client.view_api(return_format="dict", print_info=False)
    endpoint = info.get("named_endpoints", {}).get("/compare", {})
    return {p.get("parameter_name") for p in endpoint.get("parameters", [])}


def call_values(config: str, params: set[str]) -> dict | None:
    """/compare's settings for a configuration, or None when this server cannot be asked for it."""
    fitted = {"auto_budget": True} if "auto_budget" in params else {}  # the tree fitted to the GPU, as the app's lanes
    if config in PRECISIONS:
        return {"precision": config, **fitted}
    if config in QUANTIZATIONS:
        return {"quantization": config, **fitted} if "quantization" in params else None
    raise SystemExit(f"error: --configs {config!r} is unknown: use {', '.join(PRECISIONS + QUANTIZATIONS)}.")


def lane_row(lane: dict) -> dict:
    """What a lane's answer says: its badge, status and speed."""
    summary = lane.get("summary") or {}
    same = lane.get("identical_to_plain")
    return {
        "method": lane.get("method"),
        "identity": "plain (reference)" if same is None else ("identical" if same else "differs"),
        "stop_reason": lane.get("stop_reason"),
        "error": lane.get("error"),
        "tokens_per_s": summary.get("tokens_per_s"),
        "speedup_vs_plain": lane.get("speedup_vs_plain"),
        "new_tokens": summary.get("new_tokens"),
        "tau": summary.get("tau"),
    }


def drive(client, config: str, values: dict, lanes: list[str], tokens: int, warm_tokens: int) -> dict:
    """One warm-up call, then the measured one; the answer's lanes read."""
    row: dict = {"config": config, "settings": values}
    try:
        client.predict(PROMPT, lanes, "", warm_tokens, api_name="/compare", **values)  # untimed
        t0 = time.perf_counter()
        answer = client.predict(PROMPT, lanes, "", tokens, api_name="/compare", **values)
        row["seconds"] = round(time.perf_counter() - t0, 2)
    except Exception as err:  # noqa: BLE001 - a refused or failed call is this row's result
        row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        return row
    row["timed_out"] = bool(answer.get("timed_out"))
    row["hardware"] = answer.get("hardware")
    row["lanes"] = [lane_row(lane) for lane in answer.get("lanes", [])]
    return row


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [
        f"## The app on {meta['device']} ({meta['preset']}, /compare through gradio_client)",
        "",
        f"`{meta['command']}`; the page came up in {meta['startup_s']} s; each row is one /compare call of "
        f"{meta['tokens']} new tokens after an untimed warm-up call of the same configuration.",
        "",
        "| configuration | method | identity badge | status | tokens/s | speed-up | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if "lanes" not in row:
            lines.append(f"| {row['config']} | – | – | {row.get('error') or row.get('note')} | – | – | – |")
            continue
        for lane in row["lanes"]:
            status = lane["error"] or lane["stop_reason"] or "?"
            if row.get("timed_out"):
                status += " (timed out)"
            tps = "–" if lane["tokens_per_s"] is None else f"{lane['tokens_per_s']:.1f}"
            sp = "–" if lane["speedup_vs_plain"] is None else f"×{lane['speedup_vs_plain']:.2f}"
            lines.append(
                f"| {row['config']} | {lane['method']} | {lane['identity']} | {status} | {tps} | {sp} | "
                f"{row['seconds']} |"
            )
    return "\n".join(lines) + "\n"


def failed(row: dict) -> bool:
    return "error" in row or row.get("timed_out") or any(lane["error"] for lane in row.get("lanes", []))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python scripts/gpu_app_check.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", default=DEFAULT_PRESET)
    p.add_argument("--configs", default="bfloat16,float16,4bit", help="comma-separated precisions or quantizations")
    p.add_argument("--methods", default=None, help="lanes, comma-separated (default: the app's default lanes)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--warmup-tokens", type=int, default=16)
    p.add_argument("--threads", type=int, default=2, help="the app's torch CPU threads")
    p.add_argument("--max-call-seconds", type=float, default=600.0, help="the app's per-call cap (loads count)")
    p.add_argument("--startup-seconds", type=float, default=300.0)
    p.add_argument("--out", required=True, help="folder for app.json, app.md and app-server.log")
    args = p.parse_args(argv)
    try:
        from gradio_client import Client
    except ImportError:
        print("error: gradio_client is not installed: pip install -r requirements.txt", file=sys.stderr)
        return 2
    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.methods:
        lanes = [m.strip() for m in args.methods.split(",") if m.strip()]
    else:
        from app.sessions.state import DEFAULT_METHODS

        lanes = list(DEFAULT_METHODS)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    app = Server(
        ROOT,
        args.preset,
        args.max_call_seconds,
        ["--max-new-tokens", str(max(args.max_new_tokens, args.warmup_tokens))],
        threads=args.threads,
        log_path=out / "app-server.log",
        startup_s=args.startup_seconds,
    )
    rows: list[dict] = []
    try:
        app.__enter__()
    except SystemExit as err:  # the page never answered: the server's log tail says why
        app.__exit__(None, None, None)
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        startup = app.started_s
        client = Client(app.url, verbose=False)
        params = compare_parameters(client)
        for config in configs:
            values = call_values(config, params)
            if values is None:
                rows.append({"config": config, "note": "not driven: this /compare takes no quantization parameter"})
                print(f"[app] {config}: not driven (/compare takes no quantization parameter)", file=sys.stderr)
                continue
            print(f"[app] {config}: /compare {', '.join(lanes)} ...", file=sys.stderr, flush=True)
            rows.append(drive(client, config, values, lanes, args.max_new_tokens, args.warmup_tokens))
            print(f"[app] {config}: {json.dumps(rows[-1])[:400]}", file=sys.stderr, flush=True)
    finally:
        app.__exit__(None, None, None)
    meta = {
        "preset": args.preset,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU",
        "command": " ".join(app.cmd[1:]).replace(str(app.port), "PORT"),
        "startup_s": round(startup, 1),
        "tokens": args.max_new_tokens,
        "lanes": lanes,
        "compare_parameters": sorted(p for p in params if p),
    }
    (out / "app.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    (out / "app.md").write_text(markdown(rows, meta))
    print(markdown(rows, meta))
    return 1 if any(failed(r) for r in rows if "note" not in r) else 0


if __name__ == "__main__":
    sys.exit(main())
