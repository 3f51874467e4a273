"""Short prompts for demos and engine checks (``seer demo``, ``seer exactness``)."""

from __future__ import annotations

DEMO_PROMPTS = [
    "What is 17 + 25? Answer with a number.",
    "Write a Python function that reverses a string.",
    "Name three primary colors.",
    "Explain in one sentence why the sky is blue.",
    "If a train travels 60 km in 1.5 hours, what is its speed?",
    "Give a synonym for 'happy'.",
    "What is the capital of France?",
    "List the first five prime numbers.",
]
