"""JSON that every reader accepts: NaN and infinities (positions no round reached, empty samples) become null."""

from __future__ import annotations

import math
from typing import Any


def clean_json(obj: Any) -> Any:
    """`obj` with non-finite floats as None, tuples as lists and dict keys as strings."""
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if isinstance(obj, dict):
        return {str(k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    return obj
