"""Seer service edges: the Ray Serve application, engine backends and the ``seer`` CLI."""
