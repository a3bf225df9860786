"""Does gold-label SFT on Rank-R1 prompts reach the label? A diagnostic of the positive control (#41).

Trains SmolLM2-135M with the repository's own SFT pieces (``sft_token_ids``, ``to_policy_batch``,
``token_logprobs``: the tokens, masking and loss of ``SFTStep``) on DL20 training prompts, and prints per step
the NLL of the one answer-label token (the completion's digit) apart from the other completion tokens. Before
a step the batch is unseen (first epoch), so its label NLL is a held-out estimate: ln 5 = 1.609 is a model
that does not tell the candidates apart. At the end, the teacher-forced label accuracy (argmax over the c
label digits at the label position) on DL20 queries it did not train on (every other query) and on some
it did.

    python experiments/rankr1/label_probe.py --construction other_queries --lr 1e-4 --steps 40
    python experiments/rankr1/label_probe.py --overfit 8 --steps 25    # memorise 8 prompts: is the path open?

DL20 only (the held-out DL19 is never read here). Runs on one CPU thread in ~25-45 s a step.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--construction", default="other_queries")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--overfit", type=int, default=0, help="train and read out the first N prompts")
    parser.add_argument("--plain", action="store_true", help="the plain Setwise prompt (no reasoning)")
    parser.add_argument("--eval-prompts", type=int, default=96)
    args = parser.parse_args()

    from transformers import AutoModelForCausalLM

    from rankrl.models import resolve_model
    from rankrl.rl.batch import completion_logits, to_policy_batch, token_logprobs
    from rankrl.rl.steps import sft_token_ids
    from rankrl.rollout.base import Rollouts
    from rankrl.tasks.rankr1 import RankR1Task

    torch.manual_seed(0)
    task = RankR1Task(
        train_benchmark="dl20", eval_benchmark="dl19", construction=args.construction,
        tokenizer="smollm2-135m", num_candidates=5, passage_max_tokens=32, reasoning=not args.plain,
        sft_target="gold",
    )  # fmt: skip
    tok, examples = task.tokenizer, task.train_examples()
    pairs = [sft_token_ids(tok, s) for s in task.sft_examples()]
    digits = [tok.convert_tokens_to_ids(str(k)) for k in range(1, 6)]
    label_at = [next(j for j, t in enumerate(c) if t in digits) for _, c in pairs]
    qids = sorted({e.uid.split(":")[1] for e in examples})
    held = set(qids[1::2])  # every other DL20 query is read out, never trained on
    train = [i for i, e in enumerate(examples) if e.uid.split(":")[1] not in held]
    dev = [i for i, e in enumerate(examples) if e.uid.split(":")[1] in held]
    if args.overfit:
        train = dev = train[: args.overfit]
    print(f"train {len(train)}, read-out {len(dev)} prompts; label token {label_at[0]}", flush=True)

    model = AutoModelForCausalLM.from_pretrained(resolve_model("smollm2-135m"), dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)

    def batch_of(idx):
        chosen = [pairs[i] for i in idx]
        rollouts = Rollouts(
            prompt_ids=[p for p, _ in chosen], completion_ids=[c for _, c in chosen],
            logprobs=[[0.0] * len(c) for _, c in chosen], texts=[""] * len(chosen), group_size=1,
        )  # fmt: skip
        return to_policy_batch(rollouts, tok.pad_token_id)

    @torch.no_grad()
    def label_accuracy(idx, micro=16):
        model.eval()
        correct, nll = 0, 0.0
        for s in range(0, len(idx), micro):
            sub = idx[s : s + micro]
            logits = completion_logits(model, batch_of(sub))
            for r, i in enumerate(sub):
                logp = torch.log_softmax(logits[r, label_at[i]].float(), -1)
                correct += int(logp[digits].argmax().item() == examples[i].target["gold"])
                nll -= logp[pairs[i][1][label_at[i]]].item()
        model.train()
        return round(correct / len(idx), 4), round(nll / len(idx), 4)

    rng, order, start = random.Random(0), [], time.time()
    for step in range(1, args.steps + 1):
        if len(order) < args.batch:
            order += rng.sample(train, len(train))
        idx, order = order[: args.batch], order[args.batch :]
        batch = batch_of(idx)
        logps = token_logprobs(model, batch)
        n = batch.response_mask.sum()
        loss = -(logps * batch.response_mask).sum() / n  # SFTStep's loss: mean over completion tokens
        label_nll = -torch.stack([logps[r, label_at[i]] for r, i in enumerate(idx)]).mean().item()
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
        optimizer.step()
        rest = (loss.item() * n.item() - label_nll * len(idx)) / (n.item() - len(idx))
        row = {"step": step, "loss": loss.item(), "label_nll": label_nll, "other_tokens_nll": rest}
        row |= {"grad_norm": grad_norm, "s": time.time() - start}
        print(json.dumps({k: round(v, 4) for k, v in row.items()}), flush=True)
    read_out = {"held_out_queries": label_accuracy(dev[: args.eval_prompts])}
    if not args.overfit:
        read_out["trained_queries"] = label_accuracy(train[: args.eval_prompts // 2])
    print(json.dumps({"label_accuracy_nll": read_out}), flush=True)


if __name__ == "__main__":
    main()
