"""How a run's parts are built and recorded (rankrl.app)."""

from __future__ import annotations

import torch

from rankrl import app


def test_weights_fingerprint_never_copies_a_whole_tensor_to_float64(monkeypatch):
    """The fingerprint runs with the engine started; a float64 copy of a 14B model's embedding (5.8 GiB) would
    not fit beside it. Copies are made a chunk at a time, and the fingerprint still tells weights apart."""
    monkeypatch.setattr(app, "FINGERPRINT_CHUNK", 64)
    widest = []
    double = torch.Tensor.double

    def recording_double(self, *args, **kwargs):
        widest.append(self.numel())
        return double(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "double", recording_double)
    torch.manual_seed(0)
    model = torch.nn.Linear(50, 20).to(torch.bfloat16)  # 1,000 weights: 16 chunks
    first = app.weights_fingerprint(model)
    assert max(widest) <= 64
    assert app.weights_fingerprint(model) == first
    with torch.no_grad():
        model.weight[3, 7] += 0.5
    assert app.weights_fingerprint(model) != first


def test_the_final_evaluation_runs_on_every_rank_where_one_rank_cannot_generate_alone():
    """A tensor-parallel engine generates only with its whole group, and a sharded policy's forward needs
    every shard: there the evaluation runs on all ranks, elsewhere on the main rank alone."""

    class Engine:
        def __init__(self, tp: int) -> None:
            self.tp = tp

    policy = torch.nn.Linear(2, 2)
    assert not app.evaluation_needs_every_rank(policy, [Engine(1), object()])  # an HF engine has no tp
    assert app.evaluation_needs_every_rank(policy, [Engine(1), Engine(2)])
