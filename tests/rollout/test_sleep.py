"""Two roles' vLLM engines in one process, each sleeping and waking only its own memory.

The CPU platform has no sleep mode, so vLLM's CUDA sleep allocator is emulated by a recording stand-in that
treats its registry as vLLM 0.32's ``CuMemAllocator`` does (vllm/device_allocator/cumem.py): one per process,
``sleep`` unmaps every awake allocation it holds (offloading those with the given tags), ``wake_up`` maps back
the asleep ones with the given tags (and every non-deferrable one), and the GPU worker refuses to load a
second engine's weights while the allocator holds anything ("CuMem allocator can only be used for one
instance per process", vllm/v1/worker/gpu_worker.py). The engines themselves are real vLLM CPU engines;
only their memory bookkeeping is the stand-in's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from vllm.device_allocator import DEFERRABLE_TAGS, AllocationData

import rankrl.rollout.vllm as rv
from rankrl.models import load_policy
from rankrl.rollout.base import SamplingParams
from rankrl.rollout.sleep import OwnedAllocations, allocator_registry

GREEDY = SamplingParams(max_new_tokens=8, temperature=0.0)
PROMPT = [[{"role": "user", "content": "Name a colour."}]]


class RecordingSleepAllocator:
    """vLLM's process-wide sleep allocator as its registry behaves, recording each pointer it unmaps
    (``sleep``) or maps back (``wake_up``)."""

    def __init__(self) -> None:
        self.pointer_to_data: dict[int, AllocationData] = {}
        self.current_tag = "default"
        self.touched: list[tuple[str, int]] = []
        self._next = 0x1000

    @contextmanager
    def use_memory_pool(self, tag: str) -> Iterator[None]:
        old, self.current_tag = self.current_tag, tag
        try:
            yield
        finally:
            self.current_tag = old

    def malloc(self, nbytes: int) -> int:  # the pluggable allocator's malloc callback
        ptr, self._next = self._next, self._next + nbytes
        self.pointer_to_data[ptr] = AllocationData((0, nbytes, ptr, ptr), self.current_tag)
        return ptr

    def free(self, ptr: int) -> None:  # its free callback
        self.pointer_to_data.pop(ptr)

    def get_current_usage(self) -> int:
        return sum(data.handle[1] for data in self.pointer_to_data.values())

    def sleep(self, offload_tags: tuple[str, ...]) -> None:
        for ptr, data in self.pointer_to_data.items():
            if data.is_asleep:
                continue
            if data.tag in offload_tags:
                data.cpu_backup_tensor = torch.zeros(1)
            self.touched.append(("unmap", ptr))
            data.is_asleep = True

    def wake_up(self, tags: list[str] | None = None) -> None:
        for ptr, data in self.pointer_to_data.items():
            if data.is_asleep and (tags is None or data.tag in tags or data.tag not in DEFERRABLE_TAGS):
                self.touched.append(("map", ptr))
                data.is_asleep, data.cpu_backup_tensor = False, None


@pytest.fixture
def gpu_sleep(monkeypatch):
    """Engines started from here sleep as on a GPU, their memory in the stand-in: each start allocates its
    weights and KV cache there as the GPU worker does, and ``sleep``/``wake_up`` act on it as the worker's
    sleep-mode backend does (level 1 offloads weights, runtime state and graph pools)."""
    allocator = RecordingSleepAllocator()
    real_llm = __import__("vllm").LLM

    def gpu_like_llm(**kwargs):
        llm = real_llm(**{**kwargs, "enable_sleep_mode": False})  # vLLM's CPU platform cannot sleep
        with allocator.use_memory_pool("weights"):
            assert allocator.get_current_usage() == 0, (
                "CuMem allocator can only be used for one instance per process."
            )
            allocator.malloc(4096)
        with allocator.use_memory_pool("kv_cache"):
            allocator.malloc(8192)
        llm.sleep = lambda level=1: allocator.sleep(("weights", "runtime", "cudagraph"))
        llm.wake_up = lambda tags=None: allocator.wake_up(tags)
        return llm

    monkeypatch.setattr("vllm.LLM", gpu_like_llm)
    monkeypatch.setattr(rv, "process_sleep_allocator", lambda: allocator_registry(allocator))
    platform = rv.check_vllm_available()
    monkeypatch.setattr(platform, "is_sleep_mode_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    return allocator


def test_two_roles_sleep_and_wake_only_their_own_memory(model_dir, gpu_sleep):
    """Both roles start (vLLM alone refuses the second), and each role's sleep and wake touch only its own
    allocations: the other role stays mapped and generates the same completions before and after."""
    engines = {}
    for role in ("query", "item"):
        engines[role] = rv.VLLMEngine(*load_policy(str(model_dir / "tiny")), kv_cache_gib=0.05)
    owned = {role: set(engine.memory.owned) for role, engine in engines.items()}
    assert all(len(ptrs) == 2 for ptrs in owned.values()) and not owned["query"] & owned["item"]
    assert all(data.is_asleep for data in gpu_sleep.pointer_to_data.values())  # each slept after its start

    gpu_sleep.touched.clear()
    before = engines["item"].generate(PROMPT, n=1, sampling=GREEDY).completion_ids
    touched_by_item = set(ptr for _, ptr in gpu_sleep.touched)
    assert touched_by_item == owned["item"]  # its own sleep after generating, nothing of the query's

    gpu_sleep.touched.clear()
    engines["query"].generate(PROMPT, n=1, sampling=GREEDY)  # the query role's wake, generate, sleep
    engines["query"].sync_weights(load_policy(str(model_dir / "tiny"))[0])
    engines["query"].generate(PROMPT, n=1, sampling=GREEDY)  # its weights wake for a push, then all
    assert {ptr for _, ptr in gpu_sleep.touched} == owned["query"]
    assert [kind for kind, _ in gpu_sleep.touched] == (["map"] * 2 + ["unmap"] * 2) * 2

    item_data = [gpu_sleep.pointer_to_data[ptr] for ptr in owned["item"]]
    assert all(data.is_asleep for data in item_data)  # as the item role left them: asleep, backed up
    weights = [data for data in item_data if data.tag == "weights"]
    assert weights and all(data.cpu_backup_tensor is not None for data in weights)
    assert engines["item"].generate(PROMPT, n=1, sampling=GREEDY).completion_ids == before


def test_an_update_never_runs_beside_an_awake_engine(model_dir, gpu_sleep, monkeypatch):
    """SFT never generates: the engine must be asleep when it starts and after each push the update makes
    (across ranks a push is made at once; in one process it waits for the next generation)."""
    policy, tokenizer = load_policy(str(model_dir / "tiny"))
    engine = rv.VLLMEngine(policy, tokenizer, kv_cache_gib=0.05)
    memory = lambda: [gpu_sleep.pointer_to_data[ptr] for ptr in engine.memory.owned]  # noqa: E731
    assert all(data.is_asleep for data in memory())  # started, then asleep before the first update
    monkeypatch.setattr(rv, "is_distributed", lambda: True)  # as under torchrun: the push is made now
    monkeypatch.setattr(engine, "_gather_group", lambda requests: (requests, slice(None)))
    engine.sync_weights(policy)
    assert all(data.is_asleep for data in memory())
    assert engine.generate(PROMPT, n=1, sampling=GREEDY).completion_ids  # still serves after it


def test_an_allocation_freed_during_another_engines_call_leaves_every_registry(model_dir, gpu_sleep):
    """vLLM's free callback pops from the registry it sees; a pointer of another engine freed while one
    engine's registry is narrowed (a tensor collected then) leaves the whole registry too."""
    first = OwnedAllocations(gpu_sleep)
    second = OwnedAllocations(gpu_sleep)
    with first.narrowed():
        mine = gpu_sleep.malloc(16)
    with second.narrowed():
        theirs = gpu_sleep.malloc(16)
        gpu_sleep.free(mine)
        assert gpu_sleep.get_current_usage() == 16  # the narrowed view: the second engine's alone
    assert gpu_sleep.pointer_to_data.keys() == {theirs} and second.owned == {theirs}
    assert first.nbytes() == 0 and second.nbytes() == 16
    with first.narrowed():
        assert first.owned == set() and gpu_sleep.get_current_usage() == 0
