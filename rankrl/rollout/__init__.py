"""Generation engines behind one interface (``rankrl.rollout.base.RolloutEngine``).

- ``rankrl.rollout.hf.HFEngine``: transformers ``generate``; CPU and small GPU runs.
- ``rankrl.rollout.vllm.VLLMEngine``: a colocated vLLM engine; GPU runs (vLLM is imported only there).

Both return token ids and the sampler's log-probs under one convention (see ``rankrl.rollout.hf``).
Hydra builds them from ``conf/rollout/*.yaml`` (``_partial_``, then called with the policy and tokenizer).
"""
