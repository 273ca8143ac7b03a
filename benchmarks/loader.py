"""Loader benchmark: where a sample's time goes, against the JPEG-decode floor.

    python benchmarks/loader.py                 # generated eva episodes, 3 x 480x640 cameras
    python benchmarks/loader.py --root DIR      # the same figures on any episode root
    python benchmarks/loader.py --episodes 10000   # at scale: resolve, and a working set
                                                   # far larger than a worker's episode cache

Per-sample figures are measured on two generated roots: episodes written by polymimic's
writer (`layout: polymimic`) and by EgoVerse's (`layout: egoverse`: zarr's default codecs,
one zstd-compressed shard per array; see polymimic_data.synthetic).

Prints one JSON line per figure (DESIGN.md). `ms_per_sample` and
`decode_floor_ms_per_sample` come from the same samples in the same run, as does
`naive_zarr_ms_per_sample` (JPEGs read through zarr's array API, the common approach), and
`threaded_over_floor`: a sample's cameras decoded on threads, as a process that loads its
own samples (no loader workers) decodes them (polymimic_data.samples.decode_threads: up to
every core), against the same sequential floor.

With `--episodes N`, N small eva episodes (20 frames, 3 x 128x160 cameras, about 0.4 MB
each on disk) are generated once into the data root ($POLYMIMIC_DATA_ROOT, else
~/.cache/polymimic/data; `--data-root`), and reused by later runs. It prints the resolver's
times over them (cold: without its cache; cached), and per-sample time when nearly every
sample of a uniform shuffle reopens its episode, against the block order
(make_dataloader's `episodes_per_block`) and against the decode floor of the same samples:
the samples worker 0 of 2 gets, as the loader deals them, in one process. Each order with
the episodes' numeric arrays from a numeric pack (as the train app loads them: an open reads
no array files) and without one (`unpacked_`), an episode's open alone both ways, and a
JPEG frame's read through an open reader against a bare `os.pread` of its bytes
(`frame_read_over_pread`: the Python around a frame's one syscall).
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import io
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import simplejpeg
import torch
import zarr
from figure_lines import figure_printer  # benchmarks/ is on sys.path when run
from headline import machine
from torch.utils.data import DataLoader

from polymimic_data import EpisodeDataset, EpisodeReader, collate_samples, resolve_episodes
from polymimic_data.embodiments import get_embodiment, lacking_cameras
from polymimic_data.samples import (
    ShuffledOrder,
    decode_threads,
    make_dataloader,
    off_boundary,
    tune_worker_allocator,
)
from polymimic_data.store import MISSING  # a shard index's entry for a chunk never written
from polymimic_data.synthetic import ensure_synthetic_episodes, generate_episode

emit = figure_printer("loader")


def floor_jpeg(data: bytes, **kwargs: Any) -> tuple[bytes, int]:
    """A JPEG with the size of its decoded RGB image, read beforehand for `floor_decode`."""
    height, width, _, _ = simplejpeg.decode_jpeg_header(
        data, min_height=kwargs.get("min_height", 0), min_width=kwargs.get("min_width", 0)
    )
    return data, int(height) * int(width) * 3


def floor_decode(jpeg: tuple[bytes, int], **kwargs: Any) -> np.ndarray:
    """The decode floor: simplejpeg alone, into fresh memory off a 32-byte boundary.

    libjpeg-turbo writes output rows that start on a 32-byte boundary with non-temporal
    stores (around the cache): 1.8x the time of a 128x160 frame. Into a buffer of numpy's
    own, a process's floor came out either way, by the allocator's chance; the loader
    decodes off the boundary (polymimic_data.samples.jpeg_decode), and so does the floor.
    """
    data, nbytes = jpeg
    buffer = off_boundary(nbytes)
    return simplejpeg.decode_jpeg(data, colorspace="RGB", buffer=buffer, **kwargs)


def per_sample_figures(
    dataset: EpisodeDataset,
    threaded: EpisodeDataset,
    samples: int,
    seed: int,
    layout: str,
    rounds: int = 3,
) -> None:
    """Ours and the decode floor over the same samples, interleaved; best of `rounds` each.

    `dataset` decodes a sample's cameras one after another (the floor's way); `threaded`
    decodes them on threads as a process without loader workers does (decode_threads), the
    figure that beats the sequential floor where cores are spare.

    Both run under the allocator settings of a loader worker (see dataloaders.py): without
    them, whether a freed 0.9 MB frame's pages are reused depends on glibc's heuristics,
    and page faults alone can double the time of either.
    """
    tune_worker_allocator()
    rng = np.random.default_rng(seed)
    indices = rng.choice(len(dataset), size=min(samples, len(dataset)), replace=False).tolist()
    size = dataset.image_size
    kwargs = {"fastdct": True, "min_height": size[0], "min_width": size[1]} if size else {}
    jpegs = []
    for i in indices:
        episode, frame = dataset.locate(i)
        reader = EpisodeReader(dataset.episodes[episode].path)
        jpegs.append([floor_jpeg(reader.read_jpeg(c, frame), **kwargs) for c in dataset.cameras])
    for i in indices[:20]:  # warm: episode caches, as in a running worker
        dataset[i]
        threaded[i]

    def ours() -> float:
        start = time.perf_counter()
        for i in indices:
            dataset[i]
        return (time.perf_counter() - start) / len(indices) * 1e3

    def on_threads() -> float:
        start = time.perf_counter()
        for i in indices:
            threaded[i]
        return (time.perf_counter() - start) / len(indices) * 1e3

    def batched_on_threads() -> float:  # as a loader worker reads: a batch at once
        start = time.perf_counter()
        for at in range(0, len(indices), 32):
            threaded.__getitems__(indices[at : at + 32])
        return (time.perf_counter() - start) / len(indices) * 1e3

    def floor() -> float:
        start = time.perf_counter()
        for frame_jpegs in jpegs:
            for jpeg in frame_jpegs:
                floor_decode(jpeg, **kwargs)
        return (time.perf_counter() - start) / len(indices) * 1e3

    times = [(ours(), floor(), on_threads(), batched_on_threads()) for _ in range(rounds)]
    best_ours, best_floor, best_threaded, best_batched = (
        min(t[k] for t in times) for k in range(4)
    )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        arrays = {}
        start = time.perf_counter()
        for i in indices[:100]:
            episode, frame = dataset.locate(i)
            path = dataset.episodes[episode].path
            for camera in dataset.cameras:
                key = (episode, camera)
                if key not in arrays:
                    arrays[key] = zarr.open_array(path / f"images.{camera}", mode="r")
                data = bytes(arrays[key][frame : frame + 1][0])
                simplejpeg.decode_jpeg(data, colorspace="RGB", **kwargs)
        naive = (time.perf_counter() - start) / min(100, len(indices)) * 1e3

    emit(
        "ms_per_sample",
        best_ours,
        "ms",
        layout=layout,
        cameras=len(dataset.cameras),
        image_size=size,
        samples=len(indices),
    )
    emit("decode_floor_ms_per_sample", best_floor, "ms", layout=layout)
    emit("ms_per_sample_over_floor", best_ours / best_floor, "ratio", layout=layout, goal="<= 1.25")
    emit("naive_zarr_ms_per_sample", naive, "ms", layout=layout)
    emit("threaded_ms_per_sample", best_threaded, "ms", layout=layout,
         threads=threaded.decoder.threads, cameras=len(threaded.cameras))  # fmt: skip
    emit("threaded_over_floor", best_threaded / best_floor, "ratio", layout=layout,
         threads=threaded.decoder.threads, read="a sample at a time")  # fmt: skip
    emit("threaded_batch_over_floor", best_batched / best_floor, "ratio", layout=layout,
         threads=threaded.decoder.threads, read="a batch of 32 at once",
         goal="< 0.7 (3 cameras, cores to spare)")  # fmt: skip


def episode_open_figures(dataset: EpisodeDataset, layout: str, count: int = 20) -> None:
    """A worker opening an episode it has not seen: every numeric array read whole.

    Ours (from the chunk files) against zarr's array API, over the same episodes; this
    is per-sample cost once a data set outgrows the workers' episode caches.
    """
    episodes = dataset.episodes[:count]
    keys = dataset.spec.numeric_keys

    def ours() -> float:
        start = time.perf_counter()
        for episode in episodes:
            reader = EpisodeReader(episode.path)
            for key in keys:
                reader.read_numeric(key)
        return (time.perf_counter() - start) / len(episodes) * 1e3

    def through_zarr() -> float:
        start = time.perf_counter()
        for episode in episodes:
            group = zarr.open_group(episode.path, mode="r")
            for key in keys:
                array = group[key]
                assert isinstance(array, zarr.Array)
                np.asarray(array[: episode.total_frames], dtype=np.float32)
        return (time.perf_counter() - start) / len(episodes) * 1e3

    best = [min(pair) for pair in zip(*[(ours(), through_zarr()) for _ in range(3)], strict=True)]
    emit("episode_open_ms", best[0], "ms", layout=layout, arrays=len(keys))
    emit("zarr_episode_open_ms", best[1], "ms", layout=layout)
    emit("zarr_over_ours_episode_open", best[1] / best[0], "ratio", layout=layout)


def endless(loader: DataLoader) -> Iterator[Any]:
    """Batches across epochs, however few a root holds."""
    while True:
        yield from loader


class OneSample(torch.utils.data.Dataset):
    """Every index the same sample, decoded beforehand: a loader over it spends its time only
    on collation, the batches' trip between processes and the main process's side."""

    def __init__(self, sample: dict[str, Any], length: int) -> None:
        self.sample, self.length = sample, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        return dict(self.sample)


class OneByOne(torch.utils.data.Dataset):
    """A dataset read sample by sample: no `__getitems__`, so a loader's workers read each
    sample alone and collation stacks the images (the path before batches were read at once)."""

    def __init__(self, inner: EpisodeDataset) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.inner[index]


def loader_rate(
    dataset: Any,
    batches: int,
    batch_size: int,
    workers: int,
    prefetch: int = 4,
    recycle: bool = True,
) -> tuple[float, float]:
    """Samples/s of make_dataloader over `dataset` after 3 warm batches, and the seconds to
    its first batch (the workers' start). `recycle`: make_dataloader's `recycle_buffers`."""
    start = time.perf_counter()
    loader = make_dataloader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
                             prefetch_factor=prefetch, recycle_buffers=recycle)  # fmt: skip
    it = endless(loader)
    next(it)
    first = time.perf_counter() - start
    for _ in range(2):
        next(it)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    rate = batches * batch_size / (time.perf_counter() - start)
    del it, loader
    return rate, first


class TimedSamples(torch.utils.data.Dataset):
    """A dataset's samples, each with the seconds its worker took to make it (`bench_s`)."""

    def __init__(self, inner: EpisodeDataset) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: list[int]) -> list[dict[str, Any]]:
        """A batch's samples as the DataLoader reads them (all at once), each with its share."""
        start = time.perf_counter()
        samples = self.inner.__getitems__(indices)
        share = (time.perf_counter() - start) / max(1, len(samples))
        for sample in samples:
            sample["bench_s"] = share
        return samples


def timed_collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """collate_samples, with its seconds in the batch (`bench_collate_s`): in a worker, the
    images' buffers handed on (a batch read at once) and the numbers stacked."""
    start = time.perf_counter()
    batch = collate_samples(samples)
    batch["bench_collate_s"] = time.perf_counter() - start
    return batch


def touch_images(batch: dict[str, Any]) -> float:
    """Seconds to read one byte of every page of the batch's images, as a model's first read
    of them does (a received batch's shared memory is mapped, its pages faulted in on use)."""
    start = time.perf_counter()
    for key, value in batch.items():
        if key.startswith("images."):
            value.permute(0, 2, 3, 1).reshape(-1)[::4096].sum()  # the HWC memory, a view
    return time.perf_counter() - start


def dataloader_breakdown(
    dataset: EpisodeDataset, batches: int, batch_size: int, workers: int, floor_s: float
) -> None:
    """Where a DataLoader's time goes, measured inside it: what its workers spend making
    samples and stacking them (into shared memory), what the training process waits for a
    batch, and what its first read of a batch's images costs against a second."""
    loader = make_dataloader(TimedSamples(dataset), batch_size=batch_size, shuffle=True,
                             num_workers=workers)  # fmt: skip
    loader.collate_fn = timed_collate
    it = endless(loader)
    for _ in range(3):
        next(it)
    made, stacked, wait, first, again = [], [], 0.0, 0.0, 0.0
    start = time.perf_counter()
    for _ in range(batches):
        waited = time.perf_counter()
        batch = next(it)
        wait += time.perf_counter() - waited
        first += touch_images(batch)
        again += touch_images(batch)
        made += batch["bench_s"]
        stacked.append(batch["bench_collate_s"])
    total = time.perf_counter() - start
    del it, loader
    where = {"workers": workers, "batch_size": batch_size}
    per_sample = float(np.mean(made))
    emit("worker_busy_ms_per_sample", per_sample * 1e3, "ms", **where,
         over_floor=round(per_sample / floor_s, 3))  # fmt: skip
    emit("worker_collate_ms_per_batch", float(np.mean(stacked)) * 1e3, "ms", **where)
    emit("main_wait_ms_per_batch", wait / batches * 1e3, "ms", **where)
    emit("main_first_touch_ms_per_batch", first / batches * 1e3, "ms", **where)
    emit("main_touch_again_ms_per_batch", again / batches * 1e3, "ms", **where)
    # of the workers' time, the share spent making and collating the batches received (some
    # made before the window, as many as were prefetched in it: it is approximate)
    busy = (sum(made) + sum(stacked)) / (workers * total)
    emit("worker_busy_fraction", busy, "fraction", **where)


def _floor_in_process(jpegs: list, rounds: int, barrier: Any, results: Any) -> None:
    """One of parallel_floor's processes: the floor's decodes, started with the others."""
    barrier.wait()
    best = np.inf
    for _ in range(rounds):
        start = time.perf_counter()
        for frame_jpegs in jpegs:
            for jpeg in frame_jpegs:
                floor_decode(jpeg)
        best = min(best, (time.perf_counter() - start) / len(jpegs))
    results.put(best)


def parallel_floor(jpegs: list, processes: int, rounds: int = 8) -> float:
    """Samples/s of the decode floor in `processes` processes at once (each decoding every
    sample's JPEGs, best of `rounds`): what the machine gives with every core busy, which
    `cores / floor` assumes is `cores` times one core's (shared caches, memory bandwidth
    and a virtual machine's cores may say otherwise)."""
    context = torch.multiprocessing.get_context("fork")
    barrier, results = context.Barrier(processes), context.Queue()
    runs = [context.Process(target=_floor_in_process, args=(jpegs, rounds, barrier, results))
            for _ in range(processes)]  # fmt: skip
    for run in runs:
        run.start()
    rate = sum(1 / results.get(timeout=600) for _ in runs)
    for run in runs:
        run.join()
    return rate


def dataloader_figure(dataset: EpisodeDataset, batches: int, workers: int = 2) -> None:
    """The DataLoader against the machine's limit (cores / the decode floor), and where the
    difference goes, all from one run over the same root:

    - `worker_ms_per_sample`: what a worker does per sample (read, check, decode, assemble
      and collate a batch read at once, as a worker does, in this process, cameras decoded
      one after another as a worker on busy cores does); `worker_one_by_one_ms_per_sample`,
      each sample read alone (`dataset[i]`), and `collate_ms_per_batch`, stacking those;
    - `dataloader_one_by_one_samples_per_s`: the same loader with its samples read one by
      one (OneByOne), against batches read at once (`batch_read_over_one_by_one_...`);
    - `work_limit_samples_per_s`: cores / worker_ms_per_sample: the rate if the workers did
      nothing else and nothing else ran;
    - `transport_samples_per_s`: the same loader over one decoded sample repeated (OneSample):
      what collation, the trip between processes and the main process's side allow alone;
    - `first_batch_s`: from making the loader to its first batch (the workers' start);
    - `parallel_floor_samples_per_s`: the floor in one process per core at once, the
      limit as the machine gives it (parallel_floor), and the loader against it.
    """
    cores = len(os.sched_getaffinity(0))
    batch_size = min(32, len(dataset))
    rng = np.random.default_rng(1)
    indices = rng.choice(len(dataset), size=min(64, len(dataset)), replace=False).tolist()
    sequential = EpisodeDataset(
        dataset.episodes, embodiment=dataset.spec.name, cameras=dataset.cameras,
        image_size=dataset.image_size, history=dataset.history, horizon=dataset.horizon,
        decode_threads=1,
    )  # fmt: skip
    jpegs = []
    for i in indices:
        episode, frame = sequential.locate(i)
        reader = EpisodeReader(sequential.episodes[episode].path)
        jpegs.append([floor_jpeg(reader.read_jpeg(c, frame)) for c in sequential.cameras])
    samples = [sequential[i] for i in indices]  # warm, and what collation stacks
    best = {"worker": np.inf, "one_by_one": np.inf, "floor": np.inf, "collate": np.inf}
    for _ in range(3):
        start = time.perf_counter()  # as a worker reads them: a batch at once
        for at in range(0, len(indices), batch_size):
            collate_samples(sequential.__getitems__(indices[at : at + batch_size]))
        best["worker"] = min(best["worker"], (time.perf_counter() - start) / len(indices))
        start = time.perf_counter()
        for i in indices:
            sequential[i]
        best["one_by_one"] = min(best["one_by_one"], (time.perf_counter() - start) / len(indices))
        start = time.perf_counter()
        for frame_jpegs in jpegs:
            for jpeg in frame_jpegs:
                floor_decode(jpeg)
        best["floor"] = min(best["floor"], (time.perf_counter() - start) / len(indices))
        start = time.perf_counter()
        collate_samples(samples[:batch_size])
        best["collate"] = min(best["collate"], time.perf_counter() - start)
    # batches read at once against one by one, and into recycled buffers against fresh ones:
    rate, one_by_one, fresh, first = 0.0, 0.0, 0.0, np.inf
    for _ in range(2):  # alternated, best of 2 each
        read, started = loader_rate(dataset, batches, batch_size, workers)
        rate, first = max(rate, read), min(first, started)
        one_by_one = max(one_by_one, loader_rate(OneByOne(dataset), batches, batch_size,
                                                 workers)[0])  # fmt: skip
        fresh = max(fresh, loader_rate(dataset, batches, batch_size, workers, recycle=False)[0])
    transport, _ = loader_rate(OneSample(samples[0], len(dataset)), batches, batch_size, workers)
    limit = cores / best["floor"]
    where = {"workers": workers, "batch_size": batch_size, "cores": cores}
    emit("dataloader_samples_per_s", rate, "samples/s", **where, goal=">= 0.8 x limit")
    emit("limit_samples_per_s", limit, "samples/s", cores=cores,
         floor_ms_per_sample=round(best["floor"] * 1e3, 3))  # fmt: skip
    emit("dataloader_over_limit", rate / limit, "ratio", **where, goal=">= 0.8")
    together = parallel_floor(jpegs, cores)
    emit("parallel_floor_samples_per_s", together, "samples/s", processes=cores,
         over_limit=round(together / limit, 3))  # fmt: skip
    emit("dataloader_over_parallel_floor", rate / together, "ratio", **where)
    emit("dataloader_one_by_one_samples_per_s", one_by_one, "samples/s", **where)
    emit("batch_read_over_one_by_one_samples_per_s", rate / one_by_one, "ratio", **where,
         goal="> 1 (a batch read at once is kept only if it moves the loader)")  # fmt: skip
    emit("dataloader_fresh_buffers_samples_per_s", fresh, "samples/s", **where)
    emit("recycled_over_fresh_buffers_samples_per_s", rate / fresh, "ratio", **where,
         goal="> 1 (batch buffers are recycled only if it moves the loader)")  # fmt: skip
    emit("worker_ms_per_sample", best["worker"] * 1e3, "ms", cameras=len(dataset.cameras),
         read="a batch at once, collated")  # fmt: skip
    emit("worker_one_by_one_ms_per_sample", best["one_by_one"] * 1e3, "ms",
         cameras=len(dataset.cameras))  # fmt: skip
    emit("collate_ms_per_batch", best["collate"] * 1e3, "ms", batch_size=batch_size)
    work = best["worker"]  # its collation included
    emit("work_limit_samples_per_s", cores / work, "samples/s", cores=cores)
    emit("transport_samples_per_s", transport, "samples/s", **where)
    emit("first_batch_s", first, "s", **where)
    dataloader_breakdown(dataset, batches, batch_size, workers, best["floor"])
    for count in (1, 2, 4):  # the worker-count sweep
        swept, _ = loader_rate(dataset, batches, batch_size, count)
        emit("sweep_samples_per_s", swept, "samples/s", workers=count, batch_size=batch_size,
             over_limit=round(swept / limit, 3))  # fmt: skip
    for prefetch in (2, 8):  # and the prefetch depth's (4 above)
        swept, _ = loader_rate(dataset, batches, batch_size, workers, prefetch)
        emit("prefetch_samples_per_s", swept, "samples/s", prefetch=prefetch, **where,
             over_limit=round(swept / limit, 3))  # fmt: skip


def slot_alignment_figures(dataset: EpisodeDataset, frames: int = 32, rounds: int = 5) -> None:
    """A batch's frames decoded into consecutive slots of one buffer (as a batch read at once
    decodes them), the buffer's start on a 32-byte boundary against 16 bytes past one.

    A slot of a (B, H, W, 3) buffer whose rows are a multiple of 32 bytes starts on the
    boundary whenever the buffer does (shared memory starts on a page), and libjpeg-turbo
    writes such rows with non-temporal stores (see floor_decode).
    """
    jpegs = []
    for index in range(min(frames, len(dataset))):
        episode, frame = dataset.locate(index)
        reader = EpisodeReader(dataset.episodes[episode].path)
        jpegs.append(reader.read_jpeg(dataset.cameras[0], frame))
    height, width = (int(n) for n in simplejpeg.decode_jpeg_header(jpegs[0])[:2])
    slot = height * width * 3
    storage = torch.UntypedStorage._new_shared(slot * len(jpegs) + 32)
    raw = torch.empty(0, dtype=torch.uint8).set_(storage)
    best = {0: np.inf, 16: np.inf}
    for _ in range(rounds):
        for offset in best:
            start_at = (offset - raw.data_ptr()) % 32
            start = time.perf_counter()
            for i, data in enumerate(jpegs):
                into = raw[start_at + i * slot : start_at + (i + 1) * slot]
                simplejpeg.decode_jpeg(data, colorspace="RGB",
                                       buffer=into.numpy().reshape(height, width, 3))  # fmt: skip
            best[offset] = min(best[offset], (time.perf_counter() - start) / len(jpegs))
    where = {"height": height, "width": width}
    emit("slot_decode_ms_per_frame", best[0] * 1e3, "ms", **where, start="32-byte boundary")
    emit("slot_decode_aligned_over_off_boundary", best[0] / best[16], "ratio", **where,
         goal="<= 1.05 (else batch buffers start off the boundary)")  # fmt: skip


def root_dataset(root: Path, **kwargs: Any) -> EpisodeDataset:
    """The first embodiment found under `root`, the cameras all its episodes hold, 2 state
    steps, 16 actions."""
    episodes = resolve_episodes(root)
    embodiment = episodes[0].embodiment
    episodes = [e for e in episodes if e.embodiment == embodiment]
    cameras = tuple(
        c
        for c in get_embodiment(embodiment).cameras
        if (episodes[0].path / f"images.{c}").exists() and not lacking_cameras(episodes, [c])
    )
    return EpisodeDataset(
        episodes, embodiment=embodiment, cameras=cameras, history=2, horizon=16, **kwargs
    )


def tiny_episodes(root: Path, count: int) -> Path:
    """`count` copies of one tiny eva episode (2 frames), made by copying its folder."""
    template = generate_episode(
        root / "template" / "0.zarr",
        get_embodiment("eva_bimanual"),
        frames=2,
        height=16,
        width=16,
        seed=0,
    )
    out = root / f"tiny-{count}"
    for i in range(count):
        shutil.copytree(template, out / f"{i:024x}.zarr", copy_function=os.link)
    return out


def resolve_figures(root: Path, cache: Path, cpu: bool = False) -> None:
    """Cold (without the resolver's cache; the OS's file cache is warm) and cached.

    `cpu`: also the cached resolve's CPU time, which other work on the machine does not
    stretch as it does the wall-clock time.
    """
    start = time.perf_counter()
    count = len(resolve_episodes(root, cache_dir=cache))
    cold = time.perf_counter() - start
    start, start_cpu = time.perf_counter(), time.process_time()
    resolve_episodes(root, cache_dir=cache)
    cached, cached_cpu = time.perf_counter() - start, time.process_time() - start_cpu
    emit("resolve_cold_ms_per_episode", cold / count * 1e3, "ms", episodes=count, goal="<= 1")
    emit("resolve_cached_s", cached, "s", episodes=count, goal="< 0.5")
    if cpu:
        emit("resolve_cached_cpu_s", cached_cpu, "s", episodes=count)


SCALE_FRAMES, SCALE_SIZE = 20, (128, 160)  # small frames: 10,000 episodes in about 4 GB
SCALE_BATCH, SCALE_WORKERS, SCALE_BLOCK = 32, 2, 8


def default_data_root() -> Path:
    """Where the train app keeps generated data: $POLYMIMIC_DATA_ROOT, else the user cache."""
    if os.environ.get("POLYMIMIC_DATA_ROOT"):
        return Path(os.environ["POLYMIMIC_DATA_ROOT"])
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "polymimic" / "data"


def worker_share(dataset: EpisodeDataset, episodes_per_block: int | None, samples: int) -> list:
    """The first `samples` indices worker 0 of SCALE_WORKERS is dealt in epoch 0."""
    kwargs: dict[str, Any] = {}
    if episodes_per_block is not None:
        kwargs = {
            "episodes": dataset.sample_episodes(),
            "episodes_per_block": episodes_per_block,
            "workers": SCALE_WORKERS,
            "worker_batch_size": SCALE_BATCH,
        }
    order = list(ShuffledOrder(dataset, 0, batch_size=SCALE_BATCH, **kwargs))
    batches = [order[i : i + SCALE_BATCH] for i in range(0, len(order), SCALE_BATCH)]
    return [i for batch in batches[::SCALE_WORKERS] for i in batch][:samples]


@contextlib.contextmanager
def files_opened() -> Iterator[list[str]]:
    """The files this process opens meanwhile (os.open, as pread does, and open)."""
    paths: list[str] = []
    real_os_open, real_open = os.open, io.open

    def os_open(path: Any, *args: Any, **kwargs: Any) -> int:
        paths.append(str(path))
        return real_os_open(path, *args, **kwargs)

    def open_(file: Any, *args: Any, **kwargs: Any) -> Any:
        paths.append(str(file))
        return real_open(file, *args, **kwargs)

    os.open, io.open, builtins.open = os_open, open_, open_
    try:
        yield paths
    finally:
        os.open, io.open, builtins.open = real_os_open, real_open, real_open


def open_figures(fresh: Any, count: int = 500, rounds: int = 3) -> None:
    """An episode's open, as a worker's first sample of it meets it: its numeric arrays, bad
    frames and annotations, and its cameras' first frames read (their metadata and shard
    index with them), from disk and from the numeric pack, alternated, best of `rounds`;
    and the files one open reads (each camera's JPEG, read by pread, counted too)."""

    def open_episode(dataset: EpisodeDataset, episode: int) -> None:
        reader = dataset._cache.get(episode).reader
        for camera in dataset.cameras:
            reader.read_jpeg(camera, 0)

    best = {"disk": np.inf, "pack": np.inf}
    files = {}
    for _ in range(rounds):
        for source in best:
            dataset = fresh(pack=source == "pack")
            opened = min(count, len(dataset.episodes))
            start = time.perf_counter()
            for episode in range(opened):
                open_episode(dataset, episode)
            best[source] = min(best[source], (time.perf_counter() - start) / opened * 1e3)
            dataset = fresh(pack=source == "pack")  # its pack mapped: not an open's reads
            with files_opened() as paths:
                open_episode(dataset, 0)
            files[source] = len(paths)
    cameras = len(fresh().cameras)
    for source, name in (("disk", "disk"), ("pack", "numeric pack")):
        emit("episode_open_ms", best[source], "ms", source=name, cameras=cameras)
        goal = {"goal": f"{cameras} (each camera's JPEG)"} if source == "pack" else {}
        emit("episode_open_files_read", files[source], "files", source=name, cameras=cameras,
             **goal)  # fmt: skip
    emit("pack_over_disk_open", best["pack"] / best["disk"], "ratio")


def frame_read_figures(dataset: EpisodeDataset, episodes: int = 50, rounds: int = 15) -> None:
    """A JPEG frame's read against the one syscall under it, as an episode cache reads them.

    Every frame of the first `episodes` episodes' cameras, read through EpisodeReader (its
    files kept open, its shard indexes read) and then as a bare `os.pread` of the same
    bytes from descriptors held open: the Python around a frame's read. Best of `rounds`,
    one thread. Frames of a camera's first chunk file only (all of a small episode's).
    """
    readers = [EpisodeReader(e.path, keep_files_open=True) for e in dataset.episodes[:episodes]]
    reads: list[tuple[EpisodeReader, str, int]] = []
    spans: list[tuple[int, int, int]] = []  # (descriptor, offset, size)
    descriptors: list[int] = []
    for reader in readers:
        for camera in dataset.cameras:
            reader.read_jpeg(camera, 0)  # its shard index read: an open's work, not a read's
            array = reader._jpeg_readers[camera]  # pyright: ignore[reportPrivateUsage]
            index = array._index_cache.get(0)  # pyright: ignore[reportPrivateUsage]
            one_a_chunk = array._a_frame_a_chunk  # pyright: ignore[reportPrivateUsage]
            if index is None or not one_a_chunk:  # no shard index, or frames packed in
                continue  # chunks: no one bare read per frame to set beside
            path = array._file(0)  # pyright: ignore[reportPrivateUsage]
            descriptors.append(os.open(path, os.O_RDONLY))
            stored = [f for f in range(min(len(index), reader.total_frames))
                      if int(index[f][0]) != MISSING]  # fmt: skip
            reads += [(reader, camera, f) for f in stored]
            spans += [(descriptors[-1], int(index[f][0]), int(index[f][1])) for f in stored]
    if not reads:
        return

    def best(run: Any) -> float:
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        return min(times) / len(reads) * 1e6

    def ours() -> None:
        for reader, camera, frame in reads:
            reader.read_jpeg(camera, frame)

    def bare() -> None:
        for fd, offset, size in spans:
            os.pread(fd, size, offset)

    try:
        read_us, pread_us = best(ours), best(bare)
    finally:
        for fd in descriptors:
            os.close(fd)
    where = {"frames": len(reads), "episodes": len(readers), "cameras": len(dataset.cameras)}
    emit("frame_read_us", read_us, "us", **where)
    emit("frame_pread_us", pread_us, "us", **where)
    emit("frame_read_over_pread", read_us / pread_us, "ratio", **where)


def scale_figures(root: Path, samples: int, batches: int, rounds: int = 5) -> None:
    """A working set far larger than a worker's episode cache: uniform and block order.

    Each round builds fresh datasets (an empty episode cache, as a worker starting the
    pass), one with the numeric pack and one without, and takes the worker's samples in
    order, one by one; `batch_at_once` takes them as a loader worker does, a batch at once
    (with the pack); the floor decodes the same samples' JPEGs, read beforehand;
    `all_cached` takes them from a dataset that has every episode open already (what no
    episode cache can beat). The five are interleaved three batches (96 samples) at a
    time, so that other work on the machine weighs on them alike, and each such chunk
    counts with its best of `rounds`.
    """
    tune_worker_allocator()
    template = root_dataset(root)
    pack_dir = Path(tempfile.mkdtemp(prefix="polymimic-pack-"))

    # As worker 0 of SCALE_WORKERS decodes: with the threads such a worker takes here, not a
    # process without workers' (whose pool of threads reads each sample's frame headers to
    # choose whether to use it, a cost no such worker pays)
    threads = decode_threads(len(template.cameras), len(os.sched_getaffinity(0)), SCALE_WORKERS)

    def fresh(pack: bool = False, **overrides: Any) -> EpisodeDataset:
        dataset = EpisodeDataset(
            template.episodes,
            embodiment=template.spec.name,
            cameras=template.cameras,
            history=template.history,
            horizon=template.horizon,
            decode_threads=threads,
            **overrides,
        )
        if pack:
            dataset.use_numeric_pack(pack_dir, progress=False)
        return dataset

    start = time.perf_counter()
    fresh(pack=True)
    emit("numeric_pack_build_s", time.perf_counter() - start, "s",
         episodes=len(template.episodes))  # fmt: skip
    open_figures(fresh)
    frame_read_figures(template)
    template.use_numeric_pack(pack_dir, progress=False)  # the loader's figures, as the app runs

    def timed(run: Any, items: list) -> float:
        start = time.perf_counter()
        for item in items:
            run(item)
        return time.perf_counter() - start

    def decode(frame_jpegs: list[tuple[bytes, int]]) -> None:
        for jpeg in frame_jpegs:
            floor_decode(jpeg)

    cache = fresh()._cache._capacity
    for order, per_block in (("uniform", None), ("blocks", SCALE_BLOCK)):
        indices = worker_share(template, per_block, samples)
        jpegs = []
        for i in indices:
            episode, frame = template.locate(i)
            reader = EpisodeReader(template.episodes[episode].path)
            jpegs.append([floor_jpeg(reader.read_jpeg(c, frame)) for c in template.cameras])
        warm = fresh(cache_episodes=len(template.episodes))
        for i in indices:
            warm[i]
        per_chunk = 3 * SCALE_BATCH  # three of the worker's batches
        chunks = range(0, len(indices), per_chunk)
        times = np.zeros((rounds, len(chunks), 5))
        opened = 0
        for r in range(rounds):
            dataset, unpacked, batched = fresh(pack=True), fresh(), fresh(pack=True)
            for c, k in enumerate(chunks):
                chunk = indices[k : k + per_chunk]
                times[r, c] = [
                    timed(dataset.__getitem__, chunk),
                    timed(decode, jpegs[k : k + per_chunk]),
                    timed(warm.__getitem__, chunk),
                    timed(unpacked.__getitem__, chunk),
                    # as the worker reads them: a batch at once (EpisodeDataset.__getitems__)
                    timed(batched.__getitems__, [chunk[b : b + SCALE_BATCH]
                                                 for b in range(0, len(chunk), SCALE_BATCH)]),
                ]  # fmt: skip
            opened = dataset.episodes_opened
        # each chunk's best round: a chunk another process preempted does not count
        best = times.min(axis=0).sum(axis=0) / len(indices) * 1e3
        best_ours, best_floor, best_cached, best_unpacked, best_batched = best.tolist()
        del warm
        where = {"order": order, "episodes": len(template.episodes)}
        emit(
            "ms_per_sample",
            best_ours,
            "ms",
            **where,
            episodes_per_block=per_block,
            cache_episodes=cache,
            cameras=len(template.cameras),
            image_size=list(SCALE_SIZE),
            samples=len(indices),
            dealt_as=f"worker 0 of {SCALE_WORKERS}, batches of {SCALE_BATCH}",
        )
        emit("decode_floor_ms_per_sample", best_floor, "ms", **where)
        goal = {"goal": "<= 1.3"} if per_block else {}  # uniform: as low as opens allow
        emit("ms_per_sample_over_floor", best_ours / best_floor, "ratio", **where, **goal)
        emit("unpacked_ms_per_sample_over_floor", best_unpacked / best_floor, "ratio", **where)
        emit("batch_at_once_ms_per_sample_over_floor", best_batched / best_floor, "ratio",
             **where, read=f"batches of {SCALE_BATCH}, as a loader worker reads")  # fmt: skip
        emit("episode_opens_per_sample", opened / len(indices), "ratio", **where)
        emit("all_cached_ms_per_sample_over_floor", best_cached / best_floor, "ratio", **where)
    scale_dataloader_figures(template, batches, rounds=3)
    shutil.rmtree(pack_dir, ignore_errors=True)


def scale_dataloader_figures(template: EpisodeDataset, batches: int, rounds: int) -> None:
    """The loader itself, both orders: alternated, best of `rounds` each."""
    rates: dict[str, list[float]] = {"uniform": [], "blocks": []}
    for _ in range(rounds):
        for order, per_block in (("uniform", None), ("blocks", SCALE_BLOCK)):
            loader = make_dataloader(
                template,
                batch_size=SCALE_BATCH,
                shuffle=True,
                num_workers=SCALE_WORKERS,
                episodes_per_block=per_block,
            )
            it = iter(loader)
            for _ in range(3):
                next(it)
            start = time.perf_counter()
            for _ in range(batches):
                next(it)
            rates[order].append(batches * SCALE_BATCH / (time.perf_counter() - start))
            del it, loader
    for order, rate in rates.items():
        emit(
            "dataloader_samples_per_s",
            max(rate),
            "samples/s",
            order=order,
            episodes=len(template.episodes),
            workers=SCALE_WORKERS,
            batch_size=SCALE_BATCH,
        )
    emit(
        "blocks_over_uniform_samples_per_s",
        max(rates["blocks"]) / max(rates["uniform"]),
        "ratio",
        episodes=len(template.episodes),
    )


_RSS_PROBE = """
import resource, sys, numpy as np
from polymimic_data import EpisodeDataset, resolve_episodes
from polymimic_data.samples import make_dataloader, tune_worker_allocator
ds = EpisodeDataset(
    resolve_episodes(sys.argv[1]), embodiment="eva_bimanual", cameras=("front_1",), horizon=1
)
loader = make_dataloader(ds, batch_size=16, shuffle=True, num_workers=1)
for i, _ in enumerate(loader):
    if i * 16 >= 4000:
        break
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
"""


def worker_rss_figures(root: Path) -> None:
    for count in (100, 10_000):
        subset = root / f"subset-{count}"
        subset.mkdir()
        for path in sorted((root / "tiny-10000").iterdir())[:count]:
            (subset / path.name).symlink_to(path)
        out = subprocess.run(
            [sys.executable, "-c", _RSS_PROBE, str(subset)],
            capture_output=True,
            text=True,
            check=True,
        )
        emit(
            f"worker_peak_rss_mb_{count}_episodes", float(out.stdout.strip().splitlines()[-1]), "MB"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--root", type=Path, help="measure on these episodes instead of generated ones"
    )
    parser.add_argument("--samples", type=int, help="per figure (default 300; 2000 at scale)")
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--skip-resolve", action="store_true")
    parser.add_argument(
        "--layout",
        action="append",
        choices=("polymimic", "egoverse"),
        help="generated episodes of this layout only (repeatable; default both)",
    )
    parser.add_argument(
        "--episodes",
        type=int,
        help="the figures at scale, on this many small episodes generated once (see above)",
    )
    parser.add_argument("--data-root", type=Path, help="where --episodes keeps its episodes")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cores = len(os.sched_getaffinity(0))
    emit("machine", cores, "cores", machine=machine(), load_1min=round(os.getloadavg()[0], 2))
    if args.episodes is not None:
        root = ensure_synthetic_episodes(
            (args.data_root or default_data_root()) / "benchmarks",
            "eva_bimanual",
            episodes=args.episodes,
            frames=SCALE_FRAMES,
            height=SCALE_SIZE[0],
            width=SCALE_SIZE[1],
        )
        with tempfile.TemporaryDirectory(prefix="polymimic-bench-") as tmp_name:
            resolve_figures(root, Path(tmp_name) / "cache", cpu=True)
        scale_figures(root, args.samples or 2000, args.batches)
        slot_alignment_figures(root_dataset(root))
        emit("bench_peak_rss_mb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "MB")
        return
    with tempfile.TemporaryDirectory(prefix="polymimic-bench-") as tmp_name:
        tmp = Path(tmp_name)
        if args.root is None:
            roots = {
                layout: ensure_synthetic_episodes(
                    tmp / layout,
                    "eva_bimanual",
                    episodes=20,
                    frames=100,
                    height=480,
                    width=640,
                    layout=layout,
                )
                for layout in args.layout or ("polymimic", "egoverse")
            }
        else:
            roots = {"given": args.root}
        for layout, root in roots.items():
            sequential, threaded = root_dataset(root, decode_threads=1), root_dataset(root)
            per_sample_figures(sequential, threaded, args.samples or 300, seed=0, layout=layout)
            episode_open_figures(root_dataset(root), layout)
        dataloader_figure(root_dataset(next(iter(roots.values()))), args.batches)
        slot_alignment_figures(root_dataset(next(iter(roots.values()))))
        if not args.skip_resolve:
            tiny = tiny_episodes(tmp, 10_000)
            resolve_figures(tiny, tmp / "cache")
            worker_rss_figures(tmp)
    emit("bench_peak_rss_mb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "MB")


if __name__ == "__main__":
    main()
