"""Scheduling policies and the divided-rollout scheduler (pure, synchronous)."""
