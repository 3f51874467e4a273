"""The engine processes: ``engine_replica.EngineReplica`` (one deployment per replica), the
draft server (``draft_server.DraftServer``, the paper's DGDS) and their placement on a cluster.
Nothing is imported here (the deployments import Ray)."""
