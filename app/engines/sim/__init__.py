"""The ``sim`` backend: ``engine`` (``SimEngine``, one paper-scale instance of the ``core.sim``
simulator in wall time, and its byte codec ``SimCodec``) and ``workload`` (the responses it
replays and the prompt <-> group mapping its clients use)."""
