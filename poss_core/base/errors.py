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


class CallStopped(PossError):
    """A call's work was stopped before it finished: by Stop, a closed tab, a dropped client or the server's time
    limit per call (what was cut short, e.g. a tree-budget fit, is not kept)."""


class StallError(PossError):
    """A decode made no progress (no new round) for longer than its bound: it is ended instead of hanging, naming
    the method and what it was decoding."""


def run_cli(body, *args) -> int:
    """Run a command-line entry point: a PossError or any other failure becomes one `error:` line on stderr and a
    non-zero exit code, never a traceback (POSS_DEBUG=1 shows it)."""
    import os
    import sys

    try:
        return body(*args)
    except PossError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if os.environ.get("POSS_DEBUG"):
            raise
        first = str(err).splitlines()[0] if str(err) else ""
        print(f"error: {type(err).__name__}: {first} (POSS_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1
