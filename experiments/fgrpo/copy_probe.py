"""Did F-GRPO move the policy toward the control's answer at all? A diagnostic of the positive control (#41).

The held-out R@1 of a greedy policy moves only once the gold id becomes the policy's first choice; this probe
reads the step before that. For each run folder given, it loads the run's final weights and, for each user of
the control's training set (and of the evaluation users), teacher-forces the supervised target
(``--target gold_fixed``: the gold and the first 9 other ids in the slate, in list order, the gold ranked
first; ``gold_first``: the same ids, the gold opening the slate) up to ``<RANK>``, and reads the
next-token distribution over the pool's ids. It prints the mean probability of the gold id (among the
pool's ids: chance 1/20 for 20 candidates) and how often the gold is the most likely id.
A policy that copies the hint line scores ~1.0 on both; one that ignores it ~0.05.

    python experiments/fgrpo/copy_probe.py outputs/fgrpo/control_grpo/hint/cpu-smollm2-135m/seed0/warmstart \\
        outputs/fgrpo/control_grpo/hint/cpu-smollm2-135m/seed0/fgrpo --labels "format warm start" "F-GRPO" \\
        --out experiments/fgrpo/copy_probe.csv   # and copy_probe.md, the table

The full command behind the committed readings is in the README's positive control.

The task (construction, ids, pools) is the first present run's own config. Reads only; trains nothing, tunes
nothing. One CPU thread: 3-4 min a run for 128 + 100 users (11 min for three beside a 2-thread run).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch

RANK_OPEN = "<RANK>"
TARGETS = ("gold_fixed", "gold_first")  # the supervised answers a probe may force (rankrl.tasks.fgrpo)
DEFAULT_TARGET = TARGETS[0]


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


def readings_table(readings: pd.DataFrame, source: str) -> str:
    """The readings as the markdown table the README cites: one row a run and target, two columns a split."""
    readings = with_target(readings)
    rows = []
    for (label, run, target), by_split in readings.groupby(["label", "run", "target"], sort=False):
        row = {"run": label, "folder": f"`{run}`", "slate forced": target}
        for r in by_split.itertuples():
            row[f"{r.split}: p(gold)"] = f"{r.p_gold:.3f}"
            row[f"{r.split}: gold most likely"] = f"{r.gold_top:.2f}"
        rows.append(row)
    title = (
        "### F-GRPO positive control, hint rung: the probability of the gold's id as the first ranked id "
        "(teacher-forced after the slate of the supervised target its row names; chance 0.05 among 20 "
        "ids)\n\n"
        f"Written by `experiments/fgrpo/copy_probe.py --out` from `{source}` "
        "(SmolLM2-135M-Instruct, scale cpu, MovieLens-100K: the control's 128 training users and 100 "
        "evaluation users; one run a row, its seed the `seedK` in its folder). "
        '"slate forced": `gold_fixed`, the gold among the first ids in list order; `gold_first`, the '
        "same ids with the gold first, where a rank that copies the slate's first id reads as copying the "
        'hint without reading it. "gold most likely": the share of users for whom the '
        "gold's id is the most likely of the 20.\n\n"
    )
    table = pd.DataFrame(rows).fillna("-")  # a run read on one user set only (a candidate warm start)
    return title + table.to_markdown(index=False, disable_numparse=True) + "\n"


def with_target(readings: pd.DataFrame) -> pd.DataFrame:
    """Readings from before ``--target`` existed forced the ``gold_fixed`` slate."""
    if "target" not in readings:
        readings = readings.assign(target=DEFAULT_TARGET)
    return readings.fillna({"target": DEFAULT_TARGET})


def kept_readings(
    out: Path | None, runs: list[str], splits: list[str], targets: list[str] | None = None
) -> dict[tuple[str, str], list[dict]]:
    """(run folder, target) -> its rows in ``out`` (if it exists) for the splits asked for, in their order
    (``targets``: one a run, ``gold_fixed`` for all by default)."""
    if out is None or not out.exists():
        return {}
    old = with_target(pd.read_csv(out))
    old = old[old["run"].isin(runs) & old["split"].isin(splits)]
    rows = sorted(old.to_dict("records"), key=lambda r: splits.index(r["split"]))
    targets = targets or [DEFAULT_TARGET] * len(runs)
    return {
        (run, target): [r for r in rows if r["run"] == run and r["target"] == target]
        for run, target in zip(runs, targets)
    }


def write_readings(rows: list[dict], out: Path) -> None:
    """``out`` (CSV, the data) and the same name with ``.md`` (the table, rebuilt from the CSV)."""
    pd.DataFrame(rows).to_csv(out, index=False, float_format="%.6f")
    out.with_suffix(".md").write_text(readings_table(pd.read_csv(out), out.name))
    print(f"written to {out} and {out.with_suffix('.md')}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (a pipeline's stage folders)")
    parser.add_argument("--labels", nargs="+", help="a name for each run in the table (default: its folder)")
    parser.add_argument(
        "--splits",
        nargs="+",
        default=["train", "eval"],
        choices=["train", "eval"],
        help="which users to read (a warm start is chosen on the training users only)",
    )
    parser.add_argument(
        "--target",
        nargs="+",
        default=[DEFAULT_TARGET],
        choices=TARGETS,
        help="whose slate is teacher-forced before <RANK>: the hint SFT's (gold_fixed) or the gold-first "
        "warm start's (gold_first); one for every run, or one a run; each reading keeps its target",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="also write the readings as CSV, and the table beside it (.md); readings of runs the CSV "
        "already holds are kept, not read again (a finished run's weights do not change)",
    )
    args = parser.parse_args()
    labels = args.labels or [str(run) for run in args.runs]
    if len(labels) != len(args.runs):
        parser.error(f"{len(labels)} labels for {len(args.runs)} runs")
    targets = args.target * len(args.runs) if len(args.target) == 1 else args.target
    if len(targets) != len(args.runs):
        parser.error(f"{len(targets)} targets for {len(args.runs)} runs: give one, or one a run")
    torch.set_num_threads(1)

    from omegaconf import OmegaConf

    from rankrl.app import build_policy, build_task

    # the first run folder present: the rows of runs already in --out are kept without their folders
    present = [run for run in args.runs if (run / "config.yaml").exists()]
    if not present:
        parser.error("none of the run folders holds a config.yaml: run the pipeline first")
    cfg = OmegaConf.load(present[0] / "config.yaml")
    task = build_task(cfg)
    read = {"train": task.train_pools, "eval": lambda: task.eval_pools(cfg.eval_split)}
    splits = {split: read[split]() for split in args.splits}
    # the supervised answers (the gold ranked first, fixed fillers), whatever the run trained on
    examples = {
        (split, target): task.sft_examples_for(pools, target)
        for split, pools in splits.items()
        for target in set(targets)
    }
    sizes = ", ".join(f"{len(pools)} {split} users" for split, pools in splits.items())
    print(f"construction {task.construction}: {sizes}")
    kept = kept_readings(args.out, [str(run) for run in args.runs], list(splits), targets)
    rows = []
    for run, label, target in zip(args.runs, labels, targets):
        if len(kept.get((str(run), target), [])) == len(splits):
            rows += [r | {"label": label} for r in kept[str(run), target]]
            print(f"{run}: kept from {args.out}")
            continue
        if run not in present:
            parser.error(f"{run}: no config.yaml there, and no reading of it in {args.out}")
        model, tok = build_policy(OmegaConf.load(run / "config.yaml"), init_from=run)
        model.eval()
        cells = []
        for split, pools in splits.items():
            p, top = gold_at_rank_first(model, tok, examples[split, target], pools)
            cells.append(f"{split}: p(gold) {p:.3f}, gold most likely {top:.2f}")
            rows.append(
                {
                    "label": label,
                    "run": str(run),
                    "split": split,
                    "p_gold": p,
                    "gold_top": top,
                    "target": target,
                }
            )
        print(f"{run}: " + "; ".join(cells), flush=True)
    if args.out:
        write_readings(rows, args.out)


if __name__ == "__main__":
    main()
