"""Draft trees, verification, decoders and the events they emit."""
