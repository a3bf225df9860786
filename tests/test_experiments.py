"""Every experiment's task builds and answers one evaluation query with the tiny model.

Composition alone (tests/config) cannot catch a task whose constructor rejects its config, or whose
evaluation breaks on real data; this runs each experiment's own evaluation path, cut to one query.
Experiments whose data no build machine has (BRIGHT documents, WANDS products, images) must stop with
the data layer's error naming the command that fetches it.
"""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rankrl.data.errors import MissingDataError
from tests.conftest import compose, experiment_names


@pytest.mark.parametrize("experiment", experiment_names())
def test_experiment_evaluates_one_query_with_the_tiny_model(experiment, tmp_path, data_dir, model_dir):
    from rankrl.evaluate import evaluate

    # the transformers engine: this checks each task's evaluation path in one process, where every vLLM
    # engine would stay for good (rankrl.rollout.vllm); the engines are checked in tests/rollout
    cfg = compose(
        "evaluate",
        [
            f"experiment={experiment}",
            "model=tiny",
            "rollout=hf",
            "logger=none",
            "eval_limit=1",
            "evaluation.sampling.max_new_tokens=8",
            f"paths.log_dir={tmp_path}",
        ],
    )
    OmegaConf.update(cfg, "paths.output_dir", str(tmp_path / "run"))
    try:
        record = evaluate(cfg)
    except MissingDataError as err:
        assert "rankrl.data.prepare" in str(err) or "make data" in str(err)
        return
    assert record["metrics"], record
    assert all(isinstance(v, float) for v in record["metrics"].values())
    assert (tmp_path / "run" / "metrics.json").exists()
