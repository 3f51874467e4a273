"""Request and response shapes of other rollout APIs (OpenAI completions, SGLang /generate),
converted to and from the native job API; plain pydantic, no Ray (tested without it)."""
