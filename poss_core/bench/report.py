"""The benchmark's outputs: records.jsonl, one Spec-Bench JSONL per method, summary.json (every table),
evidence.json (the compact summary the app's Evidence tab shows), report.md (the tables of `bench.tables`, with the
command, hardware and date that produced them) and report.html (the same tables and the app's charts)."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..base.json_safe import clean_json
from ..results.analysis import aggregate, identity_check, pooled_events_by_method
from ..results.evidence import FILE_NAME as EVIDENCE_FILE
from ..results.evidence import Evidence, build_evidence, load_evidence, write_evidence
from ..results.records import TurnRecord, spec_bench_rows
from ..rounds.events import RoundEvent
from ..runtime.methods import color_of
from ..views import figures
from .tables import markdown_report, method_title


def _charts_html(
    events_by_label: dict[str, list[RoundEvent]],
    colors: dict[str, str],
    plotlyjs: str | bool,
    evidence: Evidence | None = None,
) -> list[str]:
    """The app's Plotly figures for these runs, as HTML fragments (a chart that fails says why in its place): with
    the run's `evidence`, first τ per dataset and the speed-up as the Evidence tab draws them."""
    builders = (
        [
            ("τ per dataset", lambda r, c: figures.tau_figure(*evidence.taus(), colors=evidence.colors())),
            (
                "Speed-up over plain decoding",
                lambda r, c: figures.speedup_figure(*evidence.speedups(), colors=evidence.colors()),
            ),
        ]
        if evidence is not None
        else []
    )
    builders += [
        ("Conditional pos-acc by position", lambda r, c: figures.pos_acc_figure(r, True, colors=c)),
        ("Unconditional acceptance rate by position", lambda r, c: figures.pos_acc_figure(r, False, colors=c)),
        ("Accept-length histogram", lambda r, c: figures.accept_hist_figure(r, colors=c)),
        (
            "Feature deviation by position, along the continuation",
            lambda r, c: figures.feature_deviation_figure(r, colors=c),
        ),
        (
            "Feature deviation by position, tree nodes off the accepted path",
            lambda r, c: figures.feature_deviation_figure(r, colors=c, kind="tree_off_path"),
        ),
        ("Tokens per second", lambda r, c: figures.tokens_per_s_figure(r, colors=c)),
    ]
    parts, include = [], plotlyjs
    for title, build in builders:
        try:
            fig = build(events_by_label, colors)
        except Exception as err:  # noqa: BLE001 - one broken chart must not lose the report
            parts.append(
                f"<p>{html.escape(title)}: not drawn ({html.escape(type(err).__name__)}: {html.escape(str(err))})</p>"
            )
            continue
        parts.append(f"<h3>{html.escape(title)}</h3>" + fig.to_html(full_html=False, include_plotlyjs=include))
        include = False
    return parts


def _md_to_html(md: str) -> str:
    """Enough markdown for the report's own output: headings, tables, code blocks, bullets, quotes, bold."""
    out, in_code, in_table = [], False, False
    for line in md.splitlines():
        if line.startswith("```"):
            out.append("</pre>" if in_code else "<pre>")
            in_code = not in_code
            continue
        if in_code:
            out.append(html.escape(line))
            continue
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if all(set(c) <= {"-"} and c for c in cells):
                continue
            if not in_table:
                out.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cells) + "</tr>")
                in_table = True
            else:
                out.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
            continue
        if in_table:
            out.append("</table>")
            in_table = False
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{html.escape(line[level:].strip())}</h{level}>")
        elif line.startswith("- "):
            out.append(f"<li>{html.escape(line[2:])}</li>")
        elif line.startswith("> "):
            out.append(f"<blockquote>{html.escape(line[2:])}</blockquote>")
        elif line.startswith("**") and line.endswith("**"):
            out.append(f"<p class='alarm'>{html.escape(line.strip('*'))}</p>")
        elif line.strip():
            out.append(f"<p>{html.escape(line)}</p>")
    if in_table:
        out.append("</table>")
    return "\n".join(out)


def html_report(
    markdown: str,
    events_by_label: dict[str, list[RoundEvent]],
    plotlyjs: str | bool = True,
    colors: dict[str, str] | None = None,
    evidence: Evidence | None = None,
) -> str:
    """A standalone page: the markdown tables, then the app's charts (plotly.js inlined by default: works offline)."""
    charts = _charts_html(events_by_label, colors or {}, plotlyjs, evidence)
    style = (
        "body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;"
        "text-align:right}th:first-child,td:first-child{text-align:left}pre{background:#f4f4f4;padding:.6em;"
        "white-space:pre-wrap}.alarm{background:#b00020;color:#fff;padding:1em;font-size:1.3em;font-weight:bold}"
    )
    body = _md_to_html(markdown)
    body += "\n<h2>Charts (overall, all runs pooled)</h2>\n"
    body += "\n".join(charts)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>POSS benchmark</title><style>{style}</style>"
        f"</head><body>{body}</body></html>"
    )


def write_outputs(
    out_dir: Path,
    records: Sequence[TurnRecord],
    meta: dict[str, Any],
    depth: int,
    identity: dict[str, Any] | None = None,
    plotlyjs: str | bool = True,
) -> dict[str, Path]:
    """Write records.jsonl, one Spec-Bench JSONL per method, summary.json, evidence.json, report.md and
    report.html."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    agg = aggregate(records, depth)
    if identity is None:
        identity = identity_check(records)
    paths: dict[str, Path] = {}
    with open(out_dir / "records.jsonl", "w") as f:
        for r in records:
            f.write(json.dumps(clean_json(r.to_json())) + "\n")
    paths["records"] = out_dir / "records.jsonl"
    for m in agg["methods"]:
        p = out_dir / f"{m}.jsonl"
        with open(p, "w") as f:
            for row in spec_bench_rows(records, m, meta.get("model_id", "model")):
                f.write(json.dumps(clean_json(row)) + "\n")
        paths[m] = p
    summary = {"meta": meta, "identity": identity, **agg}
    (out_dir / "summary.json").write_text(json.dumps(clean_json(summary), indent=1))
    paths["summary"] = out_dir / "summary.json"
    paths["evidence"] = write_evidence(out_dir / EVIDENCE_FILE, build_evidence(records, meta, depth, identity, agg=agg))
    md = markdown_report(agg, identity, meta)
    (out_dir / "report.md").write_text(md + "\n")
    paths["markdown"] = out_dir / "report.md"
    labels = meta.get("labels", {})
    events = {method_title(m, labels): ev for m, ev in pooled_events_by_method(records, agg["methods"]).items()}
    colors = {method_title(m, labels): color_of(m) for m in agg["methods"] if color_of(m)}
    (out_dir / "report.html").write_text(html_report(md, events, plotlyjs, colors, load_evidence(paths["evidence"])))
    paths["html"] = out_dir / "report.html"
    return paths
