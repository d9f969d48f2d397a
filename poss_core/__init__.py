"""POSS (position specialists) speculative decoding engine: target wrapper, draft, trees, verification, events."""

__version__ = "0.1.0"
