"""Answers of the trainer endpoints (OpenAI completions, SGLang ``/generate``) built from a
finished job's groups; their request and response models are ``app.api.trainer``. Plain
pydantic, no Ray (tested without it)."""
