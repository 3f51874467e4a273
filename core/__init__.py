"""Seer core: pure, synchronous algorithms (scheduling, drafting, simulation, engine types).

Nothing under ``core`` imports Ray, an HTTP server, a database driver, torch or vLLM at module
import time; heavy optional backends are imported lazily inside the functions that need them.
"""
