"""The benchmark: `python -m poss_core.bench` (cli), its timed runs (runner), records, tables (analysis), outputs
(report), the engine-overhead measurement (overhead) and the Plotly figures the report and the app both draw."""


def main(argv=None) -> int:
    """The benchmark CLI (the `poss-bench` console script); imported lazily so `import poss_core.bench` stays light."""
    from .cli import main as cli_main

    return cli_main(argv)
