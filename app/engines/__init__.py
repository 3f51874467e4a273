"""Engine backends behind the chunk-level interface of ``core.engine``; chosen by name."""
