"""Cluster simulator: cost model, workloads, acceptance model, discrete-event simulation."""
