"""What every request model of the API shares: strictness, prompts, Unicode text.

Every request model is strict: unknown fields, strings for numbers, booleans for ids and
NaN/Infinity are rejected with 422 naming the field (never coerced, never a 500).

Bounds that depend on the deployment's model (its vocabulary, its context, its logprobs) are
marked in the static schema with ``DEPLOYMENT_BOUND``; a deployment serves its schema with the
numbers written there (``app.serve.ingress.schema``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

#: Strictness shared by every model that a client sends.
STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

#: Largest policy version (and RL iteration) a request may name.
MAX_VERSION = 2**31 - 1


def decimal_pattern(limit: int) -> str:
    """A regex (for JSON Schema's ``pattern`` and Python's ``re``) that matches exactly the
    decimal spellings of 1..``limit`` in ASCII digits, leading zeros allowed: a bound on a number
    sent as a string that a schema can state."""
    if limit < 1:
        raise ValueError(f"limit={limit} must be at least 1")
    s = str(limit)
    alts = [f"[1-9][0-9]{{0,{len(s) - 2}}}"] if len(s) > 1 else []  # fewer digits
    for i, d in enumerate(s):  # as many digits: the first i as in limit, then one below it
        low = 1 if i == 0 else 0
        if int(d) > low:
            alts.append(f"{s[:i]}[{low}-{int(d) - 1}][0-9]{{{len(s) - i - 1}}}")
    alts.append(s)
    return "^0*(?:" + "|".join(alts) + ")$"


#: JSON Schema keyword marking a bound of the deployment's model; its value says which:
DEPLOYMENT_BOUND = "x-deployment-bound"
#: an array of token ids: each in [0, vocab_size), at most max_model_len - 1 of them
TOKEN_IDS = "token_ids"
#: an integer count of tokens to generate: below max_model_len
NEW_TOKENS = "new_tokens"
#: a logprobs mode: the one the engines compute (engine.logprobs_mode)
LOGPROBS_MODE = "logprobs_mode"
#: ``json_schema_extra`` of a field that caps the tokens generated
NEW_TOKENS_BOUND: dict[str, Any] = {DEPLOYMENT_BOUND: NEW_TOKENS}

#: Token ids of a prompt: non-negative ints (booleans are not ids).
TokenIds = list[int]
#: A prompt of a request: text or token ids, not empty (the ingress's 422 "prompt is empty",
#: said in the schema too).
PromptText = Annotated[str, WithJsonSchema({"type": "string", "minLength": 1})]
PromptIds = Annotated[
    TokenIds,
    WithJsonSchema(
        {
            "type": "array",
            "items": {"type": "integer", "minimum": 0},
            "minItems": 1,
            DEPLOYMENT_BOUND: TOKEN_IDS,
        }
    ),
]
#: Most prompts one request may carry (``RolloutRequest.prompts``).
MAX_PROMPTS = 4096
#: Prompts given as a list (OpenAI's ``prompt``, SGLang's ``text`` and ``input_ids``): one group
#: each, 1..MAX_PROMPTS of them as in a native job.
PromptTexts = Annotated[list[PromptText], Field(min_length=1, max_length=MAX_PROMPTS)]
PromptIdLists = Annotated[list[PromptIds], Field(min_length=1, max_length=MAX_PROMPTS)]
#: Stop strings of the OpenAI and SGLang requests: one, or a list of up to 16.
Stops = str | Annotated[list[str], Field(max_length=16)] | None


def _not_streaming(value: bool) -> bool:
    if value:
        raise ValueError("streaming is not supported: send false or leave stream out")
    return value


#: ``stream`` of the OpenAI and SGLang requests: a JSON boolean that must be false (``0`` is
#: not one: ``Literal[False]`` let it through, as ``0 == False`` in Python).
NoStream = Annotated[
    bool,
    AfterValidator(_not_streaming),
    WithJsonSchema({"type": "boolean", "const": False}),
]


def lone_surrogate(value: Any, path: str = "") -> str | None:
    """Where in ``value`` (decoded JSON) the first string that is not Unicode text is, e.g.
    ``prompts[0]`` or ``user``; None when every string (keys too) is. JSON's ``\\u`` escapes can
    carry half a UTF-16 surrogate pair (``"\\ud800"``), which no tokenizer, encoder or database
    takes."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path or "body"
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            here = f"{path}.{k}" if path else str(k)
            if not isinstance(k, str) or lone_surrogate(k) is None:
                found = lone_surrogate(v, here)
            else:
                found = f"{path or 'body'} (a key)"
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found = lone_surrogate(v, f"{path}[{i}]")
            if found:
                return found
    return None


class ClientRequest(BaseModel):
    """Base of every body a client sends: its text must be Unicode (422 naming the field, not a
    500 from the tokenizer or the encoder of the answer)."""

    @model_validator(mode="before")
    @classmethod
    def _unicode_text(cls, data: Any) -> Any:
        where = lone_surrogate(data)
        if where is not None:
            raise ValueError(
                f"{where} is not valid Unicode text: it holds a lone UTF-16 surrogate (a \\uD800-"
                "\\uDFFF escape without its pair)"
            )
        return data
