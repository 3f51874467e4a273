"""The scheduler process (one replica): ``deployment.SeerScheduler`` around the ``dispatcher``
that owns the core scheduler, with the jobs, the replica pool, the weight updater, the live
speculation settings and the metrics. Nothing is imported here (the deployment imports Ray)."""
