"""Ray Serve deployments: the HTTP ingress and the engine replicas."""
