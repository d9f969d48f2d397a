"""The results tables of README.md and docs/results.md, rendered from the committed evidence summaries
(assets/evidence/*.json) and the bundled drafts' model cards, so no figure is copied by hand.

    python scripts/doc_tables.py            # rewrite every table in place
    python scripts/doc_tables.py --check    # exit 1 and name the tables that differ from what the files hold

A table lives between `<!-- table:NAME -->` and `<!-- /table:NAME -->` in a Markdown file; everything between the
two markers is this tool's output (the table, then a line with the command, hardware and date it rests on). The
tables (`TABLES`):

- `tau`: τ per dataset, pooled and as the mean of datasets with 95% intervals, and the change over EAGLE and over
  the hass control with paired-bootstrap intervals (the paper's settings);
- `pos-acc`: conditional pos-acc by position with the rounds behind each figure, and the share of rounds that
  drafted the deepest position;
- `deviation`: feature deviation (L2) by position along the target's continuation, and on tree nodes off the
  accepted path;
- `speed`: speed-up over plain decoding and tokens/s, with the paper's tree and with the Demo tab's tree;
- `heldout`: each bundled draft's held-out top-1 by position, from its model card;
- `glance`: the README's summary: τ with its changes over EAGLE and hass, and the speed-up with either tree.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a file from anywhere: the package is beside

from poss_core.results.analysis import OVERALL  # noqa: E402
from poss_core.results.evidence import Evidence, load_evidence  # noqa: E402

PRESET = "smollm2-135m"
PAPER = ROOT / "assets" / "evidence" / f"{PRESET}.json"
DEMO = ROOT / "assets" / "evidence" / f"{PRESET}-demo.json"
DRAFTS = ROOT / "assets" / "drafts" / PRESET
DOCS = [ROOT / "README.md", ROOT / "docs" / "results.md"]
# The command that remakes each summary (its meta keeps the benchmark's own, longer command line).
COMMANDS = {
    PAPER.name: "python scripts/benchmark.py paper --limit 10 --out results/paper-10q --evidence",
    DEMO.name: "python scripts/benchmark.py demo --out results/demo --evidence",
}
MARKER = re.compile(r"(<!-- table:(?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- /table:(?P=name) -->)", re.S)


def _num(v: float | None, digits: int = 2) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _pct(e) -> str:
    if e is None or e.value is None:
        return ""
    return f"{e.value * 100:+.1f}% ({e.low * 100:+.1f} to {e.high * 100:+.1f})"


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _source(ev: Evidence, path: Path = PAPER) -> str:
    """The line under a table: the command, the settings, the questions, the machine and the date."""
    m, rs = ev.meta, ev.meta.run_settings
    hardware = m.hardware.split(";")[0].removeprefix("cpu:").replace(", Linux x86_64", "")
    settings = (
        f"{m.dtype}, depth {rs.get('depth')}, top-k {rs.get('top_k')}, tree budget {rs.get('tree_budget')}, "
        f"{rs.get('max_new_tokens')} new tokens, {rs.get('runs')} run(s)"
    )
    return f"\n\n`{COMMANDS.get(path.name, m.summary_command)}`: {settings}; {m.questions}; {hardware}; {m.date[:10]}."


def tau_table(ev: Evidence) -> str:
    """τ per dataset, pooled, mean of datasets (95%), and the change over EAGLE and over hass (95%)."""
    head = ["method", *ev.datasets, "pooled τ", "mean of datasets (95%)", "vs EAGLE (95%)", "vs hass (95%)"]
    rows = []
    for m in ev.methods:
        r = ev.results.get(m.name)
        if r is None or m.plain:
            continue
        per_set = [_num(r.scopes[d].tau.value) if d in r.scopes else "–" for d in ev.datasets]
        mean = r.tau_mean_of_datasets
        rows.append(
            [
                m.short,
                *per_set,
                _num(r.scopes[OVERALL].tau.value),
                f"{_num(mean.value)} ({_num(mean.low)} to {_num(mean.high)})",
                _pct(r.tau_vs_eagle.estimate()) if r.tau_vs_eagle else "",
                _pct(r.tau_vs_hass.estimate()) if r.tau_vs_hass else "",
            ]
        )
    ident = ev.identity
    same = ident.checked - ident.mismatches - ident.near_ties
    identity = (
        f"\n\nIdentity with plain decoding ({ident.reference}): {same} of {ident.checked} turns token for "
        f"token"
        + (f", {ident.near_ties} rounding near-ties" if ident.near_ties else "")
        + (f", **{ident.mismatches} mismatches**" if ident.mismatches else "")
        + "."
    )
    return _table(head, rows) + identity + _source(ev)


def pos_acc_table(ev: Evidence) -> str:
    """Conditional pos-acc (%) by position with its n, and the share of rounds that drafted the deepest position."""
    head = ["method", *[f"k={k}" for k in range(1, ev.depth + 1)], f"rounds that drafted k={ev.depth}"]
    rows = []
    for m in ev.draft_methods():
        cell = ev.results[m.name].scopes[OVERALL]
        stats = cell.stats()
        values, (_, n) = stats.rates(True), stats.counts(True)
        share = stats.drafted_share()
        rows.append(
            [
                m.short,
                *[f"{_num(v * 100, 1)} ({c})" for v, c in zip(values, n)],
                f"{_num(share[-1] * 100, 0)}%" if share else "–",
            ]
        )
    return _table(head, rows) + "\n\n(n: rounds that accepted k−1 tokens and drafted position k)" + _source(ev)


def deviation_table(ev: Evidence) -> str:
    """Mean L2 deviation by position: along the continuation (from every position, and from round roots), and on tree
    nodes off the accepted path."""
    head = ["method", "measured", *[f"k={k}" for k in range(1, ev.depth + 1)], "n at k=1"]
    rows = []
    for m in ev.draft_methods():
        dev = ev.results[m.name].scopes[OVERALL].deviation
        measured = (
            ("continuation, every position", dev.every_position),
            ("continuation, round roots", dev.continuation),
            ("tree, off path", dev.tree_off_path),
        )
        for name, points in measured:
            if not points:
                continue
            by_k = {p.k: p for p in points}
            rows.append(
                [
                    m.short,
                    name,
                    *[_num(by_k[k].l2, 1) if k in by_k else "–" for k in range(1, ev.depth + 1)],
                    str(points[0].n),
                ]
            )
    return _table(head, rows) + _source(ev)


def speed_table(paper: Evidence, demo: Evidence | None) -> str:
    """Speed-up over plain decoding, tokens/s and drafting ms per round, with the paper's tree and with the Demo tab's
    tree."""

    def cells(ev: Evidence | None, name: str) -> list[str]:
        if ev is None or name not in ev.results or OVERALL not in ev.results[name].scopes:
            return ["not run", "", ""]
        c = ev.results[name].scopes[OVERALL]
        std = f" ± {c.speedup.std:.2f}" if c.speedup.std else ""
        drafting = _num(c.draft_ms.mean, 1) if c.draft_ms is not None and c.draft_ms.mean else "–"
        return [f"×{_num(c.speedup.mean)}{std}", _num(c.tokens_per_s.mean, 1), drafting]

    def setting(ev: Evidence | None) -> str:
        if ev is None:
            return "not run"
        rs = ev.meta.run_settings
        return f"{rs.get('tree_budget')}-node tree, {ev.meta.dtype}"

    head = ["method", f"speed-up, {setting(paper)}", "tokens/s", "drafting ms/round"]
    head += [f"speed-up, {setting(demo)}", "tokens/s", "drafting ms/round"]
    rows = [
        [m.short, *cells(paper, m.name), *cells(demo, m.name)]
        for m in paper.methods
        if m.name in paper.results and not m.name.startswith("plain-")
    ]
    return _table(head, rows) + _source(paper) + (_source(demo, DEMO) if demo is not None else "")


def glance_table(paper: Evidence, demo: Evidence | None) -> str:
    """The README's table: τ (mean of datasets) with its changes over EAGLE and hass, and both speed-ups."""

    def speed(ev: Evidence | None, name: str) -> str:
        if ev is None or name not in ev.results or OVERALL not in ev.results[name].scopes:
            return "not run"
        return f"×{_num(ev.results[name].scopes[OVERALL].speedup.mean)}"

    head = [
        "draft",
        "τ, mean of 6 datasets (95%)",
        "vs EAGLE (95%)",
        "vs hass (95%)",
        "speed-up, paper's tree (fp32)",
        "speed-up, Demo's tree (bf16)",
    ]
    rows = []
    for m in paper.draft_methods():
        r = paper.results[m.name]
        mean = r.tau_mean_of_datasets
        rows.append(
            [
                m.label,
                f"{_num(mean.value)} ({_num(mean.low)} to {_num(mean.high)})",
                _pct(r.tau_vs_eagle.estimate()) if r.tau_vs_eagle else "",
                _pct(r.tau_vs_hass.estimate()) if r.tau_vs_hass else "",
                speed(paper, m.name),
                speed(demo, m.name),
            ]
        )
    return _table(head, rows) + _source(paper) + (_source(demo, DEMO) if demo is not None else "")


def heldout_table(drafts: Path = DRAFTS) -> str:
    """Each bundled draft's held-out top-1 by position (decoding unroll), from its model card."""
    rows, depth = [], 0
    for folder in sorted(p for p in drafts.iterdir() if (p / "model_card.json").is_file()):
        card = json.loads((folder / "model_card.json").read_text())
        top1 = card.get("heldout_top1_by_position_decoding") or []
        depth = max(depth, len(top1))
        values = [f"{v:.3f}" for v in top1] or ["not measured yet (null in its card)"]
        steps = (card.get("lineage") or {}).get("total_steps", card.get("steps", ""))
        rows.append([card.get("label", folder.name), f"{steps:,}" if isinstance(steps, int) else str(steps), *values])
    head = ["draft", "optimizer steps (lineage)", *[f"k={k}" for k in range(1, depth + 1)]]
    return (
        _table(head, [r + [""] * (len(head) - len(r)) for r in rows])
        + f"\n\nFrom `{drafts.relative_to(ROOT)}/*/model_card.json` (`heldout_top1_by_position_decoding`)."
    )


def tables() -> dict[str, Callable[[], str]]:
    """Every table by name, rendered lazily (a missing summary only fails the tables that need it)."""
    paper = lambda: load_evidence(PAPER)  # noqa: E731
    demo = lambda: load_evidence(DEMO) if DEMO.is_file() else None  # noqa: E731
    return {
        "tau": lambda: tau_table(paper()),
        "pos-acc": lambda: pos_acc_table(paper()),
        "deviation": lambda: deviation_table(paper()),
        "speed": lambda: speed_table(paper(), demo()),
        "heldout": lambda: heldout_table(),
        "glance": lambda: glance_table(paper(), demo()),
    }


TABLES = ("tau", "pos-acc", "deviation", "speed", "heldout", "glance")


def render(text: str, rendered: dict[str, str]) -> str:
    """`text` with every marked table replaced by its rendering."""

    def sub(m: re.Match) -> str:
        if m.group("name") not in rendered:
            raise SystemExit(f"error: unknown table {m.group('name')!r} (tables: {', '.join(TABLES)}).")
        return f"{m.group(1)}{rendered[m.group('name')]}\n{m.group(4)}"

    return MARKER.sub(sub, text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python scripts/doc_tables.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table differs")
    args = p.parse_args(argv)
    makers = tables()
    names = sorted({m.group("name") for f in DOCS for m in MARKER.finditer(f.read_text())})
    rendered = {name: makers[name]() for name in names if name in makers}
    stale = []
    for f in DOCS:
        old = f.read_text()
        new = render(old, rendered)
        if new != old:
            stale.append(str(f.relative_to(ROOT)))
            if not args.check:
                f.write_text(new)
    if args.check and stale:
        print(
            f"tables differ from the evidence in {', '.join(stale)}: run python scripts/doc_tables.py", file=sys.stderr
        )
        return 1
    print(("rewrote " + ", ".join(stale)) if stale and not args.check else "tables are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
