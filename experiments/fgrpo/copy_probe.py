"""Did F-GRPO move the policy toward the control's answer at all? A diagnostic of the positive control (#41).

The held-out R@1 of a greedy policy moves only once the gold id becomes the policy's first choice; this probe
reads the step before that. For each run folder given, it loads the run's final weights and, for each user of
the control's training set (and of the evaluation users), teacher-forces the supervised target
(``sft_target=gold_fixed``: the gold and the first 9 other ids in the slate, the gold ranked first) up to
``<RANK>``, and reads the next-token distribution over the pool's ids. It prints the mean probability of the
gold id (among the pool's ids: chance 1/20 for 20 candidates) and how often the gold is the most likely id.
A policy that copies the hint line scores ~1.0 on both; one that ignores it ~0.05.

    python experiments/fgrpo/copy_probe.py outputs/fgrpo/control_grpo/hint/cpu-smollm2-135m/seed0/warmstart \\
        outputs/fgrpo/control_grpo/hint/cpu-smollm2-135m/seed0/fgrpo

The task (construction, ids, pools) is the first run's own config. Reads only; trains nothing, tunes
nothing. One CPU thread: 3-4 min a run for 128 + 100 users (11 min for three beside a 2-thread run).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

RANK_OPEN = "<RANK>"


def _rank_position(tok, completion_ids: list[int]) -> int:
    """Index of the completion token that follows ``<RANK>`` (the first ranked id)."""
    for j in range(1, len(completion_ids) + 1):
        if tok.decode(completion_ids[:j]).endswith(RANK_OPEN):
            return j
    raise ValueError(f"no {RANK_OPEN} in {tok.decode(completion_ids)!r}")


@torch.no_grad()
def gold_at_rank_first(model, tok, examples, pools) -> tuple[float, float]:
    """(mean probability of the gold id among the pool's ids, share where it is the most likely id)."""
    from rankrl.rl.steps import sft_token_ids

    probs, tops = [], []
    for example, pool in zip(examples, pools):
        prompt, completion = sft_token_ids(tok, example)
        j = _rank_position(tok, completion)
        ids = torch.tensor([prompt + completion[:j]])
        logits = model(ids).logits[0, -1]
        label_ids = [tok.convert_tokens_to_ids(c.label) for c in pool.candidates]
        gold = [i for i, c in enumerate(pool.candidates) if c.key in pool.gold]
        if completion[j] != label_ids[gold[0]]:  # the target ranks the gold first, one token per id
            raise ValueError(f"{example.uid}: the token after {RANK_OPEN} is not the gold's id")
        p = torch.softmax(logits[label_ids].float(), dim=0)
        probs.append(float(p[gold].sum()))
        tops.append(float(int(p.argmax()) in gold))
    return sum(probs) / len(probs), sum(tops) / len(tops)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (a pipeline's stage folders)")
    parser.add_argument("--out", type=Path, help="also write the readings as CSV")
    args = parser.parse_args()
    torch.set_num_threads(1)

    from omegaconf import OmegaConf

    from rankrl.app import build_policy, build_task
    from rankrl.rl.task import SFTExample
    from rankrl.tasks.fgrpo import factorized_answer, factorized_messages, sft_rank, sft_slate

    cfg = OmegaConf.load(args.runs[0] / "config.yaml")
    task = build_task(cfg)
    n, k = task.slate_size, task.rank_size

    def examples(pools):
        return [
            SFTExample(
                p.uid,
                factorized_messages(p, n, k),
                factorized_answer(p, slate := sft_slate(p, n, task.seed, "first"), sft_rank(p, slate, k)),
            )
            for p in pools
        ]

    splits = {"train": task.train_pools(), "eval": task.eval_pools(cfg.eval_split)}
    sizes = ", ".join(f"{len(pools)} {split} users" for split, pools in splits.items())
    print(f"construction {task.construction}: {sizes}")
    rows = []
    for run in args.runs:
        model, tok = build_policy(OmegaConf.load(run / "config.yaml"), init_from=run)
        model.eval()
        cells = []
        for split, pools in splits.items():
            p, top = gold_at_rank_first(model, tok, examples(pools), pools)
            cells.append(f"{split}: p(gold) {p:.3f}, gold most likely {top:.2f}")
            rows.append({"run": str(run), "split": split, "p_gold": p, "gold_top": top})
        print(f"{run}: " + "; ".join(cells), flush=True)
    if args.out:
        import pandas as pd

        pd.DataFrame(rows).to_csv(args.out, index=False, float_format="%.6f")
        print(f"written to {args.out}")


if __name__ == "__main__":
    main()
