"""The Demo tab: its layout and wiring, the handlers of its buttons and views, what they draw (tokens, trees,
charts) and the settings they read."""
