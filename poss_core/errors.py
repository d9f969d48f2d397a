"""Errors a user can act on: each names the bad value and what would be valid."""


class PossError(Exception):
    """Base class for every error the engine raises on purpose (shown to users as one line)."""


class ConfigError(PossError, ValueError):
    """A setting is out of range or inconsistent."""


class PromptError(PossError, ValueError):
    """A prompt is empty or does not fit the model's context window."""


class CheckpointError(PossError):
    """A draft checkpoint is missing, corrupt, or made for another target."""


class ModelLoadError(PossError):
    """A target model could not be found or loaded."""
