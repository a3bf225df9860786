"""Sleep and wake for several colocated vLLM engines in one process: each touches only its own memory.

vLLM's sleep allocator (``CuMemAllocator``) is one per process. It keeps every allocation it made in one
registry, ``pointer_to_data`` (pointer -> handle, tag, CPU backup, asleep flag), and its ``sleep`` and
``wake_up`` walk the whole registry: putting one engine to sleep would offload the other engine's weights
and drop its KV cache while that engine believes it is awake, and waking one would map the other's memory
back. vLLM also refuses to start a second sleeping engine in a process (its worker asserts that the
allocator holds nothing when it loads weights: "CuMem allocator can only be used for one instance per
process").

``OwnedAllocations`` gives an engine a private registry: every call into that engine (its start, a
generation, a weight push, sleep, wake) runs with the allocator's registry narrowed to the engine's own
allocations (``narrowed``), so vLLM's own sleep/wake loops, its usage count and its start-up check see only
that engine. Allocations made during the call are the engine's; a pointer freed during it leaves both
registries, whoever owned it. Between calls the allocator holds the whole registry, as vLLM left it.

This leans on one private attribute of vLLM's allocator, ``pointer_to_data``; ``allocator_registry``
checks it is there, so a vLLM that renames it fails at start, not at the first sleep.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

REGISTRY = "pointer_to_data"


class _NarrowedRegistry(dict):
    """One engine's slice of the allocator's registry that writes through to the whole of it.

    vLLM's malloc callback adds a pointer with ``registry[ptr] = data`` (the engine's, and the whole
    registry's); its free callback removes one with ``registry.pop(ptr)``, which may be another engine's
    (a tensor collected during this call): it is taken from the whole registry either way.
    """

    def __init__(self, everything: dict[int, Any], owned: set[int]) -> None:
        super().__init__((ptr, everything[ptr]) for ptr in owned if ptr in everything)
        self.everything, self.owned = everything, owned

    def __setitem__(self, ptr: int, data: Any) -> None:
        super().__setitem__(ptr, data)
        self.everything[ptr] = data
        self.owned.add(ptr)

    def pop(self, ptr: int, *default: Any) -> Any:
        super().pop(ptr, None)
        self.owned.discard(ptr)
        return self.everything.pop(ptr, *default)


class OwnedAllocations:
    """The allocations of one engine in a process-wide sleep allocator (see the module docstring)."""

    def __init__(self, allocator: Any) -> None:
        self.allocator = allocator
        self.owned: set[int] = set()

    @contextmanager
    def narrowed(self) -> Iterator[None]:
        """Run the block with the allocator seeing only this engine's allocations (re-entrant)."""
        everything = getattr(self.allocator, REGISTRY)
        if isinstance(everything, _NarrowedRegistry):
            if everything.owned is not self.owned:  # one engine's call made from inside another's
                raise RuntimeError("a vLLM engine was called while another engine's memory was narrowed")
            yield
            return
        self.owned.intersection_update(everything)  # freed since (by vLLM, outside this engine's calls)
        setattr(self.allocator, REGISTRY, _NarrowedRegistry(everything, self.owned))
        try:
            yield
        finally:
            setattr(self.allocator, REGISTRY, everything)

    def nbytes(self) -> int:
        """Bytes this engine holds in the allocator (asleep or awake)."""
        registry = getattr(self.allocator, REGISTRY)
        return sum(registry[ptr].handle[1] for ptr in self.owned if ptr in registry)


def allocator_registry(allocator: Any) -> Any:
    """``allocator`` after checking it keeps the registry this module narrows; a vLLM that does not stops
    here with the reason, not at the first sleep."""
    if not isinstance(getattr(allocator, REGISTRY, None), dict):
        raise RuntimeError(
            f"vLLM's sleep allocator {type(allocator).__name__} has no {REGISTRY!r} registry: this vLLM "
            "cannot sleep two engines of one process apart; set rollout.enable_sleep_mode=false"
        )
    return allocator


def process_sleep_allocator() -> Any:
    """vLLM's process-wide sleep allocator (CUDA), checked by ``allocator_registry``."""
    from vllm.device_allocator import get_mem_allocator_instance

    return allocator_registry(get_mem_allocator_instance())
