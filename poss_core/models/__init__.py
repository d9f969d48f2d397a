"""Target wrapper, draft model, checkpoints and presets."""
