"""The benchmark: `python -m poss_core.bench` (cli), its timed runs (runner), records, tables (analysis), outputs
(report), the engine-overhead measurement (overhead) and the Plotly figures the report and the app both draw."""
