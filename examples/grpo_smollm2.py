"""GRPO on SmolLM2-135M-Instruct through the Seer rollout service, on CPU.

Every iteration:
1. makes ``--prompts`` arithmetic problems with known answers (sums of two numbers in 1..20,
   products of two numbers in 2..9) and asks the service for ``--group-size`` responses to each
   (``SeerClient.rollout``: the native ``POST /v1/rollouts``, text prompts in the model's chat
   template, temperature 1, token ids and logprobs back);
2. scores every response: reward 1 when its answer is right, else 0, where the answer is the
   *last integer on the first non-empty line* of the response (``parse_answer``: "12",
   "7 + 5 = 12" and "7 + 5 is 12." all answer 12; a rambling first line rarely ends on the
   right number);
3. takes one GRPO policy-gradient step with torch on the same weights the service sampled with:
   group-normalized advantages ``(r - mean(group)) / (std(group) + 1e-6)`` (population std; a
   group whose rewards are all equal teaches nothing), token logprobs recomputed by the torch
   model on the sampled token ids, the clipped surrogate of GRPO averaged per response then over
   responses, no KL term (beta = 0); AdamW, gradient norm clipped to 1;
4. saves the weights as safetensors (``save_pretrained``) and loads them into every engine
   replica with ``POST /v1/weights`` (``SeerClient.update_weights``, with the checkpoint's
   digest, which every replica verifies before loading) as policy version v + 1; the
   next rollout's responses must all carry ``policy_version`` v + 1.

It prints, per iteration, the mean reward, the rollout time, the training step and the weight
update time, and ``logprob gap``: the mean |service logprob - torch logprob| over the trained
tokens. The torch model holds exactly the weights the service sampled with, so the gap stays at
float noise (~1e-3 or less) at every iteration if and only if the weight updates took effect.

By default it starts its own local Ray + Serve app (like ``seer serve``) with ``--replicas``
vLLM replicas of ``--model`` and stops it at the end; ``--url`` uses a running service instead
(then the operator token comes from ``--token`` or ``SEER_OPERATOR_TOKEN``, and ``--out`` must
be a folder the service's replicas can read).

    .venv/bin/python examples/grpo_smollm2.py --iterations 4 --prompts 8
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import re
import secrets
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):  # run as a script: the repository root holds app/ and core/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.api import GroupResult, Response, WeightsUpdate  # noqa: E402 - after the path fix-up
from app.client import SeerClient  # noqa: E402
from app.env import OPERATOR_TOKEN_ENV, operator_token  # noqa: E402
from app.weights_digest import checkpoint_digest  # noqa: E402

if TYPE_CHECKING:
    import torch


# ---------------------------------------------------------------------------------- task
@dataclass(frozen=True)
class Problem:
    """One prompt with its known answer."""

    question: str
    answer: int


def make_problems(n: int, rng: random.Random) -> list[Problem]:
    """``n`` problems, alternating a sum (two numbers in 1..20) and a product (2..9)."""
    problems = []
    for i in range(n):
        if i % 2 == 0:
            a, b = rng.randint(1, 20), rng.randint(1, 20)
            op, answer = "+", a + b
        else:
            a, b = rng.randint(2, 9), rng.randint(2, 9)
            op, answer = "*", a * b
        problems.append(Problem(f"What is {a} {op} {b}? Answer with just the number.", answer))
    return problems


_INTEGER = re.compile(r"-?\d+")


def parse_answer(text: str) -> int | None:
    """The last integer on the first non-empty line of ``text``; None when it has none."""
    line = next((x for x in text.splitlines() if x.strip()), "")
    numbers = _INTEGER.findall(line)
    return int(numbers[-1]) if numbers else None


#: A reward: (problem, sampled response) -> float.
RewardFn = Callable[[Problem, Response], float]


def answer_reward(problem: Problem, response: Response) -> float:
    """1.0 when the response's answer (``parse_answer``) is the problem's, else 0.0."""
    return 1.0 if parse_answer(response.text) == problem.answer else 0.0


def group_advantages(rewards: Sequence[float], eps: float = 1e-6) -> list[float]:
    """GRPO's advantages of one group: ``(r - mean) / (std + eps)``, population std."""
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    return [(r - mean) / (std + eps) for r in rewards]


@dataclass(frozen=True)
class Sample:
    """One sampled response, ready for the policy-gradient step."""

    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float
    service_logprobs: list[float] | None  # logprobs the service sampled it with


def score_groups(
    problems: Sequence[Problem], groups: Sequence[GroupResult], reward_fn: RewardFn
) -> tuple[list[float], list[Sample]]:
    """Every response's reward (in prompt, then response order) and its ``Sample``."""
    rewards: list[float] = []
    samples: list[Sample] = []
    for group in sorted(groups, key=lambda g: g.prompt_index):
        problem = problems[group.prompt_index]
        group_rewards = [reward_fn(problem, r) for r in group.responses]
        for response, adv in zip(group.responses, group_advantages(group_rewards), strict=True):
            samples.append(
                Sample(
                    prompt_ids=group.prompt_token_ids,
                    response_ids=response.token_ids,
                    advantage=adv,
                    service_logprobs=response.logprobs,
                )
            )
        rewards += group_rewards
    return rewards, samples


# ---------------------------------------------------------------------------------- torch
def token_logprobs(
    model: Any, batch: Sequence[tuple[list[int], list[int]]], pad_id: int = 0
) -> list[torch.Tensor]:
    """The model's logprob of every response token after its prompt, one tensor per
    ``(prompt_ids, response_ids)`` pair; the batch is right-padded (padding changes nothing)."""
    import torch

    lengths = [len(p) + len(r) for p, r in batch]
    ids = torch.full((len(batch), max(lengths)), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, (p, r) in enumerate(batch):
        ids[i, : lengths[i]] = torch.tensor(p + r)
        mask[i, : lengths[i]] = 1
    logits = model(input_ids=ids, attention_mask=mask).logits
    out = []
    for i, (p, r) in enumerate(batch):
        # the logits at position t predict token t + 1
        rows = logits[i, len(p) - 1 : len(p) - 1 + len(r)].float()
        target = torch.tensor(r).unsqueeze(-1)
        out.append(torch.log_softmax(rows, dim=-1).gather(-1, target).squeeze(-1))
    return out


def grpo_loss(
    logprobs: Sequence[torch.Tensor],
    advantages: Sequence[float],
    old_logprobs: Sequence[torch.Tensor] | None = None,
    clip_eps: float = 0.2,
    normalizer: int | None = None,
) -> torch.Tensor:
    """GRPO's clipped surrogate, negated: ``-1/N sum_i 1/|o_i| sum_t min(rho A_i,
    clip(rho, 1 - eps, 1 + eps) A_i)`` with ``rho = exp(logp - logp_old)``. ``old_logprobs``
    None: the current ones, detached (one step on fresh samples: rho = 1, the plain policy
    gradient). ``normalizer``: N, when the responses are split over micro-batches."""
    import torch

    if len(logprobs) != len(advantages):
        raise ValueError(f"{len(logprobs)} responses but {len(advantages)} advantages")
    n = normalizer if normalizer is not None else len(logprobs)
    total = torch.zeros(())
    for i, (lp, adv) in enumerate(zip(logprobs, advantages, strict=True)):
        old = lp.detach() if old_logprobs is None else old_logprobs[i]
        ratio = torch.exp(lp - old)
        surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)
        total = total + surrogate.mean()
    return -total / n


@dataclass(frozen=True)
class StepStats:
    trained: int  # responses with a non-zero advantage (the others add no gradient)
    loss: float
    grad_norm: float
    logprob_gap: float | None  # mean |service - torch| logprob over the trained tokens
    seconds: float


def train_step(
    model: Any,
    optimizer: Any,
    samples: Sequence[Sample],
    micro_batch: int = 8,
    max_grad_norm: float = 1.0,
) -> StepStats:
    """One optimizer step of GRPO on ``samples`` (gradients accumulated over micro-batches)."""
    import torch

    t0 = time.perf_counter()
    active = [s for s in samples if s.advantage != 0.0 and s.response_ids]
    if not active:
        return StepStats(0, 0.0, 0.0, None, time.perf_counter() - t0)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss_sum, gap_sum, gap_tokens = 0.0, 0.0, 0
    for start in range(0, len(active), micro_batch):
        part = active[start : start + micro_batch]
        logprobs = token_logprobs(model, [(s.prompt_ids, s.response_ids) for s in part])
        loss = grpo_loss(logprobs, [s.advantage for s in part], normalizer=len(active))
        loss.backward()
        loss_sum += float(loss.detach())
        for s, lp in zip(part, logprobs, strict=True):
            if s.service_logprobs is not None:
                theirs = torch.tensor(s.service_logprobs)
                gap_sum += float((lp.detach() - theirs).abs().sum())
                gap_tokens += len(s.service_logprobs)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    gap = gap_sum / gap_tokens if gap_tokens else None
    return StepStats(len(active), loss_sum, grad_norm, gap, time.perf_counter() - t0)


def save_checkpoint(model: Any, path: Path) -> Path:
    """The model's weights as an HF folder of safetensors (config included), written to a
    temporary name and renamed, so the service never sees half a checkpoint."""
    tmp = path.with_name(path.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    return path


# ---------------------------------------------------------------------------------- service
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def service_args(model: str, replicas: int, token: str, policy: str) -> dict[str, Any]:
    """The Serve app's config (``AppConfig``) of the local service: vLLM replicas of ``model``."""
    return {
        "num_replicas": replicas,
        "replica_num_cpus": 0.5,
        "policy": policy,
        "operator_token": token,
        "engine": {
            "backend": "vllm",
            "model": model,
            "max_model_len": 1024,
            "max_num_seqs": 64,
            "kv_cache_gib": 1,
            "speculation": {"method": "none"},
        },
    }


@contextlib.contextmanager
def local_service(
    model: str, replicas: int, policy: str, say: Callable[[str], None]
) -> Iterator[tuple[str, str]]:
    """A local Ray + the Seer Serve app (``app.serve.local``); yields (url, token)."""
    from app.serve.local import LocalService

    token = secrets.token_urlsafe(16)
    num_cpus = max(2, math.ceil(replicas * 0.5 + 0.5))  # + ingress and scheduler
    t0 = time.perf_counter()
    say(f"starting Ray + Serve with {replicas} vLLM replica(s) of {model} ...")
    with LocalService(_free_port(), num_cpus=num_cpus) as service:
        url = service.deploy(service_args(model, replicas, token, policy), 900, say=say)
        say(f"service ready in {time.perf_counter() - t0:.0f} s at {url}")
        yield url, token


# ---------------------------------------------------------------------------------- loop
@dataclass(frozen=True)
class Options:
    iterations: int = 4
    prompts: int = 8
    group_size: int = 4
    max_tokens: int = 32
    lr: float = 5e-5
    seed: int = 0
    out: Path = Path(tempfile.gettempdir()) / "seer-grpo"
    keep: int = 1
    micro_batch: int = 8


@dataclass(frozen=True)
class IterationStats:
    iteration: int
    policy_version: int  # of the rollout
    reward: float  # mean over every response
    rollout_s: float
    output_tokens: int
    step: StepStats
    save_s: float
    update_s: float  # POST /v1/weights as the client saw it
    server_update: WeightsUpdate  # the service's answer (seconds, load_seconds, ...)
    checkpoint: Path  # the weights the service runs after the update


def _load_policy(model_path: Path) -> Any:
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # loading and saving bars would break up the table
    return AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)


def run(
    client: SeerClient,
    model_path: Path,
    options: Options,
    reward_fn: RewardFn = answer_reward,
    say: Callable[[str], None] = print,
) -> list[IterationStats]:
    """The GRPO loop against the service behind ``client`` (whose token may update weights);
    ``model_path`` must hold the weights the service runs now."""
    import torch

    torch.manual_seed(options.seed)
    rng = random.Random(options.seed)
    model = _load_policy(model_path)
    optimizer = torch.optim.AdamW(model.parameters(), lr=options.lr, weight_decay=0.0)
    options.out.mkdir(parents=True, exist_ok=True)
    checkpoints: list[Path] = []
    stats: list[IterationStats] = []
    expected: int | None = None  # policy version the next rollout must carry
    for it in range(options.iterations):
        problems = make_problems(options.prompts, rng)
        t0 = time.perf_counter()
        result = client.rollout(
            [p.question for p in problems],
            options.group_size,
            options.max_tokens,
            sampling={"temperature": 1.0, "seed": options.seed * 100_003 + it},
            iteration=it,
        )
        rollout_s = time.perf_counter() - t0
        versions = {r.policy_version for g in result.groups for r in g.responses}
        if len(versions) != 1 or (expected is not None and versions != {expected}):
            raise RuntimeError(
                f"iteration {it}: responses carry policy versions {sorted(versions)}, "
                f"expected {expected if expected is not None else 'one version'}"
            )
        version = versions.pop()
        rewards, samples = score_groups(problems, result.groups, reward_fn)
        tokens = sum(len(s.response_ids) for s in samples)
        step = train_step(model, optimizer, samples, options.micro_batch)

        t1 = time.perf_counter()
        path = save_checkpoint(model, options.out / f"step-{version + 1}")
        save_s = time.perf_counter() - t1
        t2 = time.perf_counter()
        # every replica verifies the checkpoint it reads against the trainer's own digest
        answer = client.update_weights(
            str(path.resolve()), version + 1, sha256=checkpoint_digest(path)
        )
        update_s = time.perf_counter() - t2
        expected = answer.version
        checkpoints.append(path)
        while len(checkpoints) > options.keep:  # the one the service runs is always kept
            shutil.rmtree(checkpoints.pop(0), ignore_errors=True)

        row = IterationStats(
            it, version, sum(rewards) / len(rewards), rollout_s, tokens, step, save_s,
            update_s, answer, path,
        )  # fmt: skip
        stats.append(row)
        say(format_row(row))
    return stats


def format_row(s: IterationStats) -> str:
    gap = "n/a" if s.step.logprob_gap is None else f"{s.step.logprob_gap:.1e}"
    return (
        f"iter {s.iteration}  v{s.policy_version}  reward {s.reward:.3f}  "
        f"rollout {s.rollout_s:5.1f} s ({s.output_tokens} tok)  "
        f"train {s.step.seconds:5.1f} s ({s.step.trained} resp, grad {s.step.grad_norm:.2f}, "
        f"gap {gap})  save {s.save_s:4.1f} s  weights {s.update_s:4.1f} s "
        f"(load {s.server_update.load_seconds:.1f} s)"
    )


def summary(stats: Sequence[IterationStats]) -> str:
    if not stats:
        return "no iterations"
    rewards = ", ".join(f"{s.reward:.3f}" for s in stats)
    return (
        f"rewards per iteration: {rewards}\n"
        f"mean rollout {fmean(s.rollout_s for s in stats):.1f} s, "
        f"train {fmean(s.step.seconds for s in stats):.1f} s, "
        f"weight update {fmean(s.update_s for s in stats):.1f} s; "
        f"last checkpoint {stats[-1].checkpoint}"
    )


# ---------------------------------------------------------------------------------- CLI
class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults in the help, except the None of options that have no default value."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    d = Options()
    p = argparse.ArgumentParser(
        prog="grpo_smollm2.py",
        description="A real GRPO loop on CPU through the Seer rollout service: arithmetic "
        "prompts with known answers, G responses each, reward 1 for the right answer, one "
        "policy-gradient step with torch per iteration, new weights loaded into the service "
        "with POST /v1/weights. Prints reward, rollout, training and weight-update time per "
        "iteration.",
        epilog="Starts its own Ray + Serve app unless --url is given (then --out must be "
        "readable by the service's replicas). Example: .venv/bin/python "
        "examples/grpo_smollm2.py --iterations 4 --prompts 8",
        formatter_class=_HelpFormatter,
    )
    n = "N"
    p.add_argument("--iterations", type=int, default=d.iterations, metavar=n, help="GRPO steps")
    p.add_argument(
        "--prompts", type=int, default=d.prompts, metavar=n, help="problems per iteration"
    )
    p.add_argument(
        "--group-size", type=int, default=d.group_size, metavar="G", help="responses per prompt"
    )
    p.add_argument(
        "--max-tokens", type=int, default=d.max_tokens, metavar=n, help="cap per response"
    )
    p.add_argument("--lr", type=float, default=d.lr, help="AdamW learning rate")
    p.add_argument(
        "--model",
        default="smollm2-135m-instruct",
        metavar="NAME|DIR",
        help="policy to train: a prepared model (smollm2-135m-instruct, tiny-llama; `seer "
        "prepare-model`) or a Hugging Face folder; the service must start from the same weights",
    )
    p.add_argument(
        "--replicas", type=int, default=2, metavar=n, help="vLLM replicas of the local service"
    )
    p.add_argument("--policy", default="verl", help="scheduling policy of the local service")
    p.add_argument(
        "--out", type=Path, default=d.out, metavar="DIR", help="checkpoints (DIR/step-VERSION)"
    )
    p.add_argument(
        "--keep", type=int, default=d.keep, metavar=n, help="newest checkpoints kept (>= 1)"
    )
    p.add_argument("--seed", type=int, default=d.seed, help="seed of problems, sampling, torch")
    p.add_argument(
        "--url", default=None, help="use the service running at URL instead of starting one"
    )
    p.add_argument(
        "--token",
        default=None,
        help="operator token of the --url service (default: $SEER_OPERATOR_TOKEN)",
    )
    args = p.parse_args(argv)
    for name in ("iterations", "prompts", "group_size", "max_tokens", "replicas", "keep"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if not args.lr > 0:
        p.error(f"--lr must be > 0, got {args.lr}")
    if args.url and not (args.token or operator_token()):
        p.error(f"--url needs the service's operator token: --token or {OPERATOR_TOKEN_ENV}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from app.model_cache import resolve_model

    model_path = resolve_model(args.model)
    options = Options(
        iterations=args.iterations,
        prompts=args.prompts,
        group_size=args.group_size,
        max_tokens=args.max_tokens,
        lr=args.lr,
        seed=args.seed,
        out=args.out,
        keep=args.keep,
    )
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if args.url:
            url, token = args.url, args.token or operator_token()
        else:
            url, token = stack.enter_context(
                local_service(str(model_path), args.replicas, args.policy, print)
            )
        client = stack.enter_context(SeerClient(url, token=token, timeout=60))
        print(
            f"GRPO: {options.iterations} iterations x {options.prompts} prompts x G="
            f"{options.group_size}, max_tokens {options.max_tokens}, lr {options.lr:g}"
        )
        stats = run(client, model_path, options)
    print(summary(stats))
    print(f"total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
