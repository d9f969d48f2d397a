"""What the app and the benchmark both draw: the Plotly figures (figures.py, the one module that imports plotly) and
the pooling of rounds the charts read (pooling.py)."""
