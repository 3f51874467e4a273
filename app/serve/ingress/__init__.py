"""The HTTP ingress process: ``deployment.Ingress`` and what it needs, nothing of the jobs'
state (that is the scheduler's). Nothing is imported here (the deployment imports Ray)."""
