"""DataLoaders with settings that serve throughput by default, and that resume exactly.

Persistent workers, a deep prefetch, pinned memory where a GPU exists, and memory reused
rather than made afresh for every batch: decoded frames are large (a 480x640 RGB frame is
0.9 MB), and both glibc's large allocations and a DataLoader's shared memory serve each
from fresh pages, so every frame pays page faults and zeroing. Raising the mmap threshold
in workers keeps their private pages in the heap; the shared buffers a batch's images are
decoded into are recycled once the training process has dropped the batch
(batch_buffers: `recycle_buffers`).

The loader is torchdata's StatefulDataLoader: its `state_dict()` says which samples were
handed out (not merely prefetched), and Lightning saves it in every checkpoint, so a
resumed run continues with the very next sample of the same shuffled order. That order is
ours (`ShuffledOrder`): each pass over the data is a permutation drawn from (seed, epoch,
cycle) alone, and the sampler's state is those numbers and a count. torchdata's own
RandomSampler restores a shared generator instead, and that has broken across its versions
(0.10: the first batch after a mid-epoch resume; 0.11 without workers: every epoch after
the one resumed in).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import warnings
import weakref
from collections.abc import Iterator, Sequence, Sized
from functools import cache
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import Dataset, DistributedSampler
from torch.utils.data.dataloader import _BaseDataLoaderIter

from polymimic_data.samples.batch_buffers import BufferReturns, install_pool, new_flags
from polymimic_data.samples.collate import collate_samples
from polymimic_data.samples.episode_blocks import block_order, compact_episodes, worker_lanes
from polymimic_data.samples.group_balance import balanced_order, group_members

if TYPE_CHECKING:
    from torchdata.stateful_dataloader import StatefulDataLoader

# torchdata 0.11 calls an API torch has deprecated, once per iterator: noise, not news.
warnings.filterwarnings("ignore", message="'set_vital' is deprecated", category=UserWarning)


def _stateful_dataloader() -> type[StatefulDataLoader]:
    """The StatefulDataLoader class of torchdata (the `loaders` extra), imported on use."""
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            "make_dataloader needs torchdata (its StatefulDataLoader resumes exactly): "
            "install polymimic-data[loaders]"
        ) from exc
    return StatefulDataLoader


_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_HEAP_BYTES = 1 << 30


def tune_worker_allocator(worker_id: int = 0) -> bool:
    """Keep large, short-lived buffers in the heap (glibc only); True when applied."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "mallopt"):
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, _HEAP_BYTES)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, 2 * _HEAP_BYTES)
    )


class _WorkerSetup:
    """A loader worker's start: its allocator, its signals, its pool of batch buffers."""

    def __init__(self) -> None:
        self.buffer_flags: torch.Tensor | None = None  # a RecyclingDataLoader's, set per set

    def __call__(self, worker_id: int) -> None:
        _tune_worker(worker_id)
        if self.buffer_flags is not None:
            install_pool(self.buffer_flags, worker_id)


def _tune_worker(worker_id: int) -> None:
    tune_worker_allocator(worker_id)

    if "SLURM_JOB_ID" in os.environ:
        # Slurm ends a job (scancel, requeue, preemption) with SIGTERM and, KillWait seconds
        # later, SIGKILL, to every process of the step. The trainer (Lightning, submitit)
        # lets SIGTERM pass so a requeued job is not reported failed; a worker that died of
        # it would still fail the step, from its parent, before it is requeued.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        # Its `--signal` before a time limit (submitit's USR2, Lightning's USR1 for
        # auto-requeue) reaches every process of the step too: the process that trains
        # acts on it (checkpoint, requeue). A worker would die of USR1/USR2's default
        # action, or run the trainer's handler it forked with, mid-batch.
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)


MAX_DEFAULT_WORKERS = 8  # past this, more workers hold more open episodes for little gain


def default_workers(loaders: int = 1, processes: int | None = None) -> int:
    """Workers for each of `loaders` loaders of one training process (`num_workers: auto`).

    This process's cores, shared among the node's training `processes` (default: the
    launcher's LOCAL_WORLD_SIZE, else 1) where its CPU affinity is the whole machine (a
    scheduler that binds each process to its own cores, as Slurm does, has shared them
    already), then among its loaders: at least 1, at most MAX_DEFAULT_WORKERS. A worker per
    core, not one fewer: the training process mostly waits on the device (bench-data's
    sweep on 2 cores: 2 workers deliver the most).
    """
    if loaders < 1:
        raise ValueError(f"loaders: 1 or more, got {loaders}")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    if processes is None:
        processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    if cores >= (os.cpu_count() or cores):  # not bound to a share of the machine
        cores //= max(1, processes)
    return max(1, min(MAX_DEFAULT_WORKERS, cores // loaders))


def _check_per_sample(name: str, values: np.ndarray | None, data_source: Any) -> None:
    """ValueError where `values` (one per sample, or None) do not match the dataset's length."""
    if values is not None and len(values) != len(data_source):
        raise ValueError(f"{name} names {len(values)} samples, the dataset has {len(data_source)}")


class ShuffledOrder(DistributedSampler):
    """Every index once per pass (or each group an equal share), drawn from (seed, epoch, cycle).

    Under torch.distributed each rank takes its share (rank::world_size) of the same order;
    the remainder of a pass is dropped, so that every rank gets as many indices and a
    multiple of `batch_size` (a pass is then whole batches, as with drop_last).

    Passes: `set_epoch(e)` (Lightning calls it as each epoch starts) begins cycle 0 of epoch
    e; any other new iteration is the next cycle of the same epoch (a shorter loader cycled
    within Lightning's epoch, which is the longest loader's, or a loop without epochs).
    Whether the last pass was drawn to its end does not matter: Lightning stops an epoch
    after `len` batches without asking for more.

    Its state (`state_dict`: epoch, cycle, and how many of this rank's indices were drawn)
    is all a restored sampler needs to go on where it stopped: the first iteration after
    `load_state_dict` continues that pass (and yields nothing if it was drawn to its end:
    the rest of a finished epoch). StatefulDataLoader snapshots it at every batch it hands
    out, so prefetched batches are not counted. It is a DistributedSampler so that
    Lightning keeps it rather than putting its own in under DDP.

    Block order (opt-in, see episode_blocks): with `episodes` (the episode of each index)
    and `episodes_per_block`, a pass permutes the episodes, takes them a block at a time
    and the samples of a block in a permutation of their own; each rank takes a contiguous
    share of that order (its own episodes, not a slice of every block), dealt into
    `workers` lanes of `worker_batch_size` so that each loader worker walks its own span.
    The state then also holds the block size and lanes of the pass it is in: a sampler
    restored with other settings finishes that pass in its order and uses its own from the
    next (also from a checkpoint of a uniformly shuffled pass).

    Group balance (opt-in, see group_balance): with `groups` (the group number, 0..G-1, of
    each index), a pass is as long as before but each group gets an equal share of it,
    the samples of a short group repeated and those of a long one subsampled. The state
    says whether its pass is balanced: a restored sampler finishes a uniform pass
    uniformly, and needs `groups` to finish a balanced one.
    """

    def __init__(
        self,
        data_source: Dataset[Any],
        seed: int,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        batch_size: int = 1,
        episodes: Sequence[int] | np.ndarray | None = None,
        episodes_per_block: int | None = None,
        workers: int = 1,
        worker_batch_size: int | None = None,
        groups: Sequence[int] | np.ndarray | None = None,
    ) -> None:
        distributed = dist.is_available() and dist.is_initialized()
        world_size = world_size or (dist.get_world_size() if distributed else 1)
        rank = rank if rank is not None else (dist.get_rank() if distributed else 0)
        super().__init__(
            data_source, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True
        )
        self.batch_size = batch_size
        self.cycle = 0
        self.drawn = 0
        self._continues = True  # the next iteration goes on with (epoch, cycle, drawn)
        if episodes_per_block is not None and episodes is None:
            raise ValueError("episodes_per_block needs the episode of each index (episodes=)")
        if episodes_per_block is not None and episodes_per_block < 1:
            raise ValueError(f"episodes_per_block must be >= 1, got {episodes_per_block}")
        self._episodes = compact_episodes(episodes) if episodes is not None else None
        _check_per_sample("episodes", self._episodes, data_source)
        if groups is not None and episodes_per_block is not None:
            raise ValueError("groups (a balanced shuffle) and episodes_per_block: one or the other")
        codes = np.asarray(groups, dtype=np.int64) if groups is not None else None
        _check_per_sample("groups", codes, data_source)
        self._members = group_members(codes) if codes is not None else None
        self.episodes_per_block = episodes_per_block
        self.lanes = max(1, workers)
        self.worker_batch_size = worker_batch_size or batch_size
        # (episodes_per_block or 0, lanes, balanced) of the current pass
        self._pass = self._settings()

    def _settings(self) -> tuple[int, int, bool]:
        if self.episodes_per_block is None:
            return 0, 1, self._members is not None
        return self.episodes_per_block, self.lanes, False

    def __len__(self) -> int:
        share = len(cast(Sized, self.dataset)) // self.num_replicas
        return share // self.batch_size * self.batch_size

    def _mine(self) -> list[int]:
        """The indices of the current pass that are this rank's, in order."""
        rng = np.random.default_rng([self.seed, self.epoch, self.cycle])
        per_block, lanes, balanced = self._pass
        if balanced and self._members is None:
            raise ValueError(
                "this state continues a balanced pass: the sampler needs groups= "
                "(the train app: data.balance_by as the checkpoint was made)"
            )
        if not per_block:
            if balanced and self._members is not None:
                order = balanced_order(rng, self._members)
            else:
                order = rng.permutation(len(cast(Sized, self.dataset)))
            return order[: len(self) * self.num_replicas][self.rank :: self.num_replicas].tolist()
        if self._episodes is None:
            raise ValueError(
                "this state continues a pass in block order: the sampler needs episodes="
            )
        order = block_order(rng, self._episodes, per_block)
        mine = order[self.rank * len(self) : (self.rank + 1) * len(self)]
        return worker_lanes(mine, lanes, self.worker_batch_size).tolist()

    def __iter__(self) -> Iterator[int]:
        # A generator: this runs at the first index asked for, not when the iterator is made
        # (StatefulDataLoader makes some it never uses).
        if not self._continues:
            self.cycle, self.drawn = self.cycle + 1, 0
            self._pass = self._settings()
        self._continues = False
        mine = self._mine()
        for index in mine[self.drawn :]:
            self.drawn += 1
            yield index

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.cycle, self.drawn = epoch, 0, 0
            self._pass = self._settings()
            self._continues = True

    def state_dict(self) -> dict[str, int]:
        state = {"epoch": self.epoch, "cycle": self.cycle, "drawn": self.drawn}
        if self._pass[0]:
            state |= {"episodes_per_block": self._pass[0], "lanes": self._pass[1]}
        if self._pass[2]:
            state["balanced"] = 1
        return state

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        self.epoch, self.cycle = int(state_dict["epoch"]), int(state_dict["cycle"])
        self.drawn = int(state_dict["drawn"])
        self._pass = (
            int(state_dict.get("episodes_per_block", 0)),
            int(state_dict.get("lanes", 1)),
            bool(state_dict.get("balanced", 0)),
        )
        self._continues = True


class _Returning(_BaseDataLoaderIter):
    """A loader's iterator, its batches followed by the training process's BufferReturns.

    A DataLoader iterator itself (isinstance), so that what treats one as such does so
    with it (Lightning leaves it out when it pickles its loop's state); everything else is
    the loader's own iterator's.
    """

    def __init__(self, inner: _BaseDataLoaderIter, returns: BufferReturns) -> None:
        self.inner, self.returns = inner, returns

    def __iter__(self) -> _Returning:
        return self

    def __next__(self) -> Any:
        self.returns.collect()
        batch = next(self.inner)
        self.returns.receive(batch)
        return batch

    def __len__(self) -> int:
        return len(self.inner)

    def _reset(self, loader: Any, first_iter: bool = False) -> None:
        self.inner._reset(loader, first_iter)

    def _next_index(self) -> Any:
        return self.inner._next_index()

    def _next_data(self) -> Any:
        return self.inner._next_data()

    def __getattr__(self, name: str) -> Any:  # state_dict() and the rest: the inner's
        if name in ("inner", "returns"):  # not set yet (a copy being made): not the inner's
            raise AttributeError(name)
        return getattr(self.inner, name)


@cache
def _recycling_dataloader() -> type[StatefulDataLoader]:
    """StatefulDataLoader whose workers' batch buffers are recycled (batch_buffers)."""

    class RecyclingDataLoader(_stateful_dataloader()):
        buffer_flags: torch.Tensor | None = None
        buffer_returns: BufferReturns | None = None

        def _get_iterator(self) -> Any:
            # A new set of workers (the first, after load_state_dict, after a reset that
            # shut the last down): flags of their own. Batches of an earlier set may still
            # be held, and its workers still shutting down; their flags are left to them.
            setup = self.worker_init_fn
            if isinstance(setup, _WorkerSetup) and self.num_workers > 0:
                self.buffer_flags = setup.buffer_flags = new_flags(self.num_workers)
                self.buffer_returns = BufferReturns(self.buffer_flags)
            workers = super()._get_iterator()
            if self.buffer_returns is not None:  # their storages unmapped with them (when free)
                weakref.finalize(workers, self.buffer_returns.release_mappings)
            return workers

        def __iter__(self) -> Any:
            resets = (
                self.buffer_returns is not None
                and not self._initial_iter_for_state_dict
                and self.persistent_workers
                and self._iterator is not None
            )
            if resets and self.buffer_returns is not None:
                # The same workers go on with a new pass, and what they had prefetched for
                # the last is dropped: freed before the pass's first indices go out, so no
                # worker collates one of its batches yet. (The iterator state_dict() made
                # before the first pass is not reset: its prefetched batches are delivered.)
                self.buffer_returns.reclaim()
            inner = super().__iter__()
            if self.buffer_returns is None:
                return inner
            return _Returning(inner, self.buffer_returns)

    return RecyclingDataLoader


def make_dataloader(
    dataset: Dataset[Any],
    *,
    batch_size: int,
    shuffle: bool,
    num_workers: int = 2,
    prefetch_factor: int = 4,
    pin_memory: bool | None = None,
    drop_last: bool | None = None,
    seed: int = 0,
    episodes_per_block: int | None = None,
    recycle_buffers: bool | None = None,
    groups: Sequence[int] | np.ndarray | None = None,
) -> StatefulDataLoader:
    """A DataLoader of batches in the contract of DESIGN.md (see collate_samples).

    Shuffled, the order is `ShuffledOrder(dataset, seed)`; the workers' base seed comes from
    a generator of its own, seeded by `seed`, so iterating never consumes the global random
    state. `episodes_per_block` (shuffled only; the dataset must say which episode each
    sample is of, as EpisodeDataset.sample_episodes does) shuffles by blocks of that many
    episodes, dealt to the workers in lanes (see ShuffledOrder): for data sets of many
    more episodes than a worker's episode cache holds. `recycle_buffers`: the workers' batch
    buffers are reused once the training process drops their batches (batch_buffers);
    None: for a shuffled (training) loader, not for one whose persistent workers would keep
    their buffers while they wait (validation's, between validations). `groups` (shuffled
    only): each sample's group number, 0..G-1; a pass gives each group an equal share
    (group_balance; see also EpisodeDataset.sample_groups).
    """
    loader = _stateful_dataloader()
    if (shuffle if recycle_buffers is None else recycle_buffers) and num_workers > 0:
        loader = _recycling_dataloader()
    generator = torch.Generator().manual_seed(seed)
    drop_last = shuffle if drop_last is None else drop_last
    order: dict[str, Any] = {}  # ShuffledOrder's options: the block order, group balance
    if episodes_per_block is not None:
        sample_episodes = getattr(dataset, "sample_episodes", None)
        if not shuffle or sample_episodes is None:
            raise ValueError(
                "episodes_per_block needs shuffle=True and a dataset with sample_episodes()"
            )
        order = {
            "episodes": sample_episodes(),
            "episodes_per_block": episodes_per_block,
            "workers": num_workers,
            "worker_batch_size": batch_size,
        }
    if groups is not None:
        if not shuffle:
            raise ValueError("groups (a balanced shuffle) needs shuffle=True")
        order["groups"] = groups
    return loader(
        dataset,
        batch_size=batch_size,
        sampler=(
            ShuffledOrder(dataset, seed, batch_size=batch_size if drop_last else 1, **order)
            if shuffle
            else None
        ),
        drop_last=drop_last,
        num_workers=num_workers,
        collate_fn=collate_samples,
        persistent_workers=num_workers > 0,
        prefetch_factor=prefetch_factor if num_workers > 0 else None,
        pin_memory=torch.cuda.is_available() if pin_memory is None else pin_memory,
        worker_init_fn=_WorkerSetup() if num_workers > 0 else None,
        generator=generator,
    )
