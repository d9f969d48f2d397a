"""What the page draws, from a session or a summary: tokens, trees, charts, the race line, the controls, the About
text and the Evidence tables."""
