"""The Ray Serve application, one folder per kind of process:

- ``ingress/``: the HTTP ``Ingress`` deployment (routes, error shaping, body and JSON rules,
  auth, the typed handle of the scheduler); any number of replicas, no rollout state
- ``scheduler/``: the one ``SeerScheduler`` deployment (one replica): the dispatcher and the
  jobs, replicas, weights, speculation settings and metrics it owns
- ``replica/``: the engine replicas (``engine-{i}``, one deployment each), the draft server
  they exchange group texts with, and where they are placed

``builder.build_app`` wires them (the Serve configs import it); ``options``, ``logs`` and
``detached`` are shared by every process.
"""
