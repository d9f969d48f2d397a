"""The Evidence tab: the bundled benchmark summaries and any results folder, drawn as tables and charts."""
