"""The engine's foundation, importing nothing of the project: errors, paths, JSON safety, the decoding settings'
declarations and the prompt files' reader."""
