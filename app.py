"""Entry point (also the Hugging Face Space's app_file): parse flags, build the Gradio app, launch it.

python app.py [--preset smollm2-135m] [--host 127.0.0.1] [--port 7860] [--share] [--concurrency N] [--threads N]
              [--dtype auto|float32|bfloat16|float16] [--max-call-seconds S] [--max-new-tokens N]
              [--class-reset-key KEY] [--no-preload]
"""

from __future__ import annotations

try:  # ZeroGPU Spaces: `spaces` must be imported before anything initialises CUDA
    import spaces  # type: ignore  # noqa: F401
except ImportError:
    spaces = None

from app.launch import build_parser, cpu_threads, main, preload, prepare_target  # noqa: E402,F401  (app.py's API)

if __name__ == "__main__":
    main()
