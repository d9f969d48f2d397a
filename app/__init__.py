"""The Gradio app of the POSS demo: lanes, token rendering, charts, runs on disk and the Blocks layout."""
