"""Deployment tools: the demo staged as a Hugging Face Space, drafts exported as Hub model repos."""
