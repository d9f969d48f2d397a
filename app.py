"""Entry point (also the Hugging Face Space's app_file): parse flags, build the Gradio app, launch it.

python app.py [FLAGS]; `python app.py --help` lists every flag (app/page/launch.py declares them).
"""

from __future__ import annotations

try:  # ZeroGPU Spaces: `spaces` must be imported before anything initialises CUDA
    import spaces  # type: ignore  # noqa: F401
except ImportError:
    spaces = None

from app.page.launch import main  # noqa: E402

if __name__ == "__main__":
    main()
