"""Training drafts: self-distillation data, feature extraction, losses, the trainer and its CLI."""
