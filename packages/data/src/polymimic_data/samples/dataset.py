"""A map-style dataset over episodes of one embodiment, yielding samples of the batch contract.

Per worker, each episode is opened once and its numeric arrays (small) are read whole into
a bounded cache, checked for bad values once, vectorised over time. JPEGs are read by byte
range and decoded at the model's resolution. A bad sample is replaced by a valid one and
reported in the sample's `faults`; an episode with too many faults is dropped.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from polymimic_data.embodiments.declared import lacking_cameras
from polymimic_data.embodiments.registry import get_embodiment
from polymimic_data.episodes.resolver import EpisodeInfo
from polymimic_data.geometry.layouts import Layout
from polymimic_data.samples.batch_buffers import batch_buffer
from polymimic_data.samples.collate import Sample
from polymimic_data.samples.episode_cache import EpisodeCache, LoadedEpisode
from polymimic_data.samples.faults import (
    DataFault,
    EpisodeFaults,
    NoValidSampleError,
    SampleFault,
    read_fault,
)
from polymimic_data.samples.group_balance import group_codes, lacking_attribute
from polymimic_data.samples.jpeg_decode import CameraDecoder, decode_jpeg, decoded_size
from polymimic_data.samples.numeric_pack import NumericPack
from polymimic_data.samples.windows import WindowSampler, assemble, frames_of, prompt_at

log = logging.getLogger(__name__)

_MAX_REPLACEMENTS = 32


class EpisodeDataset(Dataset[Sample]):
    """Samples of one embodiment: images, K-step state history and a T-step action chunk.

    Action step j of a sample at frame t reads frame t + j * action_stride; or, with
    `action_window` W, the chunk spans frames t .. t + W - 1 resampled to `horizon` steps
    (linear interpolation, SLERP for quaternions). `frames`, when
    given, restricts the dataset to those (episode, frame) pairs (validation subsampling,
    contiguous video episodes); otherwise every frame is a sample. Which samples exist and
    which frames each reads is the plan of its `sampler` (a WindowSampler); the dataset reads
    episodes (through a bounded cache), checks and assembles samples, and replaces bad ones.
    `decode_threads`: threads decoding a sample's cameras (None: by the cores the loader's
    workers and the training process leave spare, up to one a camera; see
    jpeg_decode.decode_threads).
    """

    def __init__(
        self,
        episodes: Sequence[EpisodeInfo],
        *,
        embodiment: str,
        layout: str | None = None,
        cameras: Sequence[str] = ("front_1",),
        image_size: tuple[int, int] | Sequence[int] | None = None,
        history: int = 1,
        horizon: int = 16,
        action_stride: int = 1,
        action_window: int | None = None,
        frames: Sequence[tuple[int, int]] | None = None,
        cache_episodes: int = 256,
        max_bad_fraction_per_episode: float = 0.2,
        decode_threads: int | None = None,
    ) -> None:
        if history < 1 or horizon < 1 or action_stride < 1:
            raise ValueError(
                "history, horizon and action_stride must be >= 1, got "
                f"{history}, {horizon}, {action_stride}"
            )
        self.episodes = list(episodes)
        self.spec = get_embodiment(embodiment)
        wrong = [e.hash for e in self.episodes if e.embodiment != self.spec.name]
        if wrong:
            raise ValueError(f"episodes {wrong[:5]} are not of embodiment {self.spec.name!r}")
        unknown = [c for c in cameras if c not in self.spec.cameras]
        if unknown:
            raise ValueError(
                f"cameras {unknown} are not cameras of {self.spec.name} ({list(self.spec.cameras)})"
            )
        lacking = lacking_cameras(self.episodes, cameras)  # each holds what it declares
        if lacking:
            raise ValueError(f"cameras {list(cameras)}: {lacking}")
        self.recipe = self.spec.recipe(layout or self.spec.default_layout)
        self.layout: Layout = self.spec.layout(self.recipe.layout)
        self.cameras = tuple(cameras)
        # a sample's cameras decoded on threads where the cores allow (jpeg_decode)
        self.decoder = CameraDecoder(len(self.cameras), decode_threads)
        self.image_size = (
            (int(image_size[0]), int(image_size[1])) if image_size is not None else None
        )
        self.history, self.horizon, self.action_stride = history, horizon, action_stride
        if action_window is not None and action_window < 2:
            raise ValueError(f"action_window must span at least 2 frames, got {action_window}")
        self.action_window = action_window
        self.max_bad_fraction_per_episode = max_bad_fraction_per_episode
        self.sampler = WindowSampler(
            [e.total_frames for e in self.episodes],
            self.recipe,
            history=history,
            horizon=horizon,
            action_stride=action_stride,
            action_window=action_window,
            frames=frames,
        )
        frame = self.recipe.frame
        frame_keys = {frame} if frame and ":" not in frame else set()
        keys = sorted(set(self.recipe.state.keys) | set(self.recipe.actions.keys) | frame_keys)
        self._keys = keys
        self._cache = EpisodeCache(self.episodes, keys, self._camera_reference, cache_episodes)
        self._faults = EpisodeFaults(
            [e.hash for e in self.episodes],
            [e.total_frames for e in self.episodes],
            max_bad_fraction=max_bad_fraction_per_episode,
            describe=lambda episode: str(self.episodes[episode].path),
        )

    def __len__(self) -> int:
        return len(self.sampler)

    def use_numeric_pack(
        self, cache_dir: str | os.PathLike[str], *, progress: bool = True
    ) -> NumericPack | None:
        """Take what opening an episode reads from a pack under `cache_dir` (built once if missing).

        An open then reads no file where the disk still holds what was packed (its numeric
        arrays, annotations and cameras' shard indices), and reads them as before where it
        does not (numeric_pack). Call it before the loader's workers start; None (and a
        warning) where the episodes cannot share a pack.
        """
        pack = NumericPack.load_or_build(
            cache_dir, self.episodes, self._keys, self.cameras, progress=progress
        )
        self._cache.pack = pack
        return pack

    @property
    def episodes_opened(self) -> int:
        """Episodes this process has opened so far (re-openings of evicted ones included)."""
        return self._cache.opened

    def sample_episodes(self) -> np.ndarray:
        """The episode (its number in `episodes`) of every sample, in index order."""
        return self.sampler.sample_episodes()

    def sample_groups(self, attribute: str) -> tuple[np.ndarray, list[str]]:
        """Every sample's group by its episode's `attribute` (e.g. "task_name"), and the groups.

        Group numbers index the returned labels, in order of first appearance. Raises
        ValueError where episodes lack the attribute: how many, and one with what it holds.
        """
        missing = lacking_attribute(self.episodes, attribute)
        if missing:
            raise ValueError(f"balance_by: {missing}")
        codes, labels = group_codes([str(e.attrs[attribute]) for e in self.episodes])
        return codes[self.sample_episodes()], labels

    def locate(self, index: int) -> tuple[int, int]:
        return self.sampler.locate(index)

    def _check_numeric(self, episode: int, frame: int, loaded: LoadedEpisode) -> None:
        if not loaded.bad:
            return
        n = self.episodes[episode].total_frames
        history, steps = self.sampler.windows(frame)
        if self.recipe.frame in loaded.bad and loaded.bad[self.recipe.frame][0][frame]:
            reason = loaded.bad[self.recipe.frame][1][frame]
            raise SampleFault(
                DataFault(self.episodes[episode].hash, self.recipe.frame, frame, reason)
            )
        for recipe, frames in ((self.recipe.state, history), (self.recipe.actions, steps)):
            for key, idx in frames_of(recipe, frames, n).items():
                if key in loaded.bad:
                    mask, reasons = loaded.bad[key]
                    hits = idx[mask[idx]]
                    if len(hits):
                        bad_frame = int(hits[0])
                        fault = DataFault(
                            self.episodes[episode].hash, key, bad_frame, reasons[bad_frame]
                        )
                        raise SampleFault(fault)

    def _camera_reference(self, info: EpisodeInfo) -> np.ndarray | None:
        """An episode's camera pose for `camera:` layout frames (None when the identity)."""
        frame = self.recipe.frame or ""
        if not frame.startswith("camera:"):
            return None
        pose = self.spec.camera_pose(info.attrs, frame.removeprefix("camera:"))
        return None if np.array_equal(pose, [0.0, 0, 0, 1, 0, 0, 0]) else pose

    def _reference(self, frame: int, loaded: LoadedEpisode) -> np.ndarray | None:
        """The pose the sample's vectors are expressed in, if the layout has a frame."""
        if not self.recipe.frame or self.recipe.frame.startswith("camera:"):
            return loaded.fixed_reference
        return loaded.arrays[self.recipe.frame][frame]

    def numeric_sample(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """State (K, S), actions (T, A) and action mask (T,), without touching images.

        Raises SampleFault when the window touches bad values.
        """
        episode, frame = self.locate(index)
        return self._numeric(episode, frame, self._cache.get(episode))

    def _numeric(
        self, episode: int, frame: int, loaded: LoadedEpisode
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        self._check_numeric(episode, frame, loaded)
        n = self.episodes[episode].total_frames
        reference = self._reference(frame, loaded)
        plan = self.sampler
        tables = (
            plan.row_tables(loaded.row_tables, loaded.arrays, n)
            if reference is None and 0 <= frame < n
            else {}
        )
        rows = plan.rows_at
        state = rows(tables["state"], frame, plan.state_rows) if "state" in tables else None
        actions = rows(tables["actions"], frame, plan.action_rows) if "actions" in tables else None
        if state is None or actions is None:  # assembled from the frames its window reads
            history, steps = plan.windows(frame)
            if state is None:
                state = assemble(self.recipe, self.recipe.state, loaded.arrays, history, reference)
            if actions is None:
                actions = assemble(
                    self.recipe, self.recipe.actions, loaded.arrays, steps, reference
                )
        return state, actions, plan.action_mask(frame, n)

    def _build(self, index: int, outs: Sequence[torch.Tensor] | None = None) -> Sample:
        sample, jpegs = self._prepare(index)
        self._attach(sample, self.decoder(jpegs, self.image_size, decode_jpeg, outs))
        return sample

    def _prepare(self, index: int) -> tuple[Sample, list[bytes]]:
        """The sample at `index` but its images, and its cameras' JPEGs (SampleFault)."""
        episode, frame = self.locate(index)
        self._faults.check_not_dropped(episode, frame)
        loaded = self._cache.get(episode)
        state, actions, mask = self._numeric(episode, frame, loaded)
        sample: Sample = {
            "embodiment": self.spec.name,
            "state": torch.from_numpy(state),
            "actions": torch.from_numpy(actions),
            "action_mask": torch.from_numpy(mask),
            "prompt": prompt_at(loaded.annotations, frame),
            "episode": self.episodes[episode].hash,
            "frame": frame,
        }
        jpegs = []
        for camera in self.cameras:
            try:
                jpegs.append(loaded.reader.read_jpeg(camera, frame))
            except Exception as exc:
                raise read_fault(sample["episode"], f"images.{camera}", frame, exc) from exc
        return sample, jpegs

    def _attach(self, sample: Sample, images: Sequence[torch.Tensor | Exception]) -> None:
        """The decoded `images` into `sample`, or a SampleFault naming the one that failed."""
        for camera, image in zip(self.cameras, images, strict=True):
            if isinstance(image, Exception):
                key = f"images.{camera}"
                raise read_fault(sample["episode"], key, sample["frame"], image) from image
            sample[f"images.{camera}"] = image

    def __getitem__(self, index: int) -> Sample:
        """The sample at `index`, or a stand-in for it; `faults` lists what was met on the way."""
        return self._sample(index)

    def __getitems__(self, indices: Sequence[int]) -> list[Sample]:
        """The samples at `indices`, each as `self[i]` gives it, images decoded into one buffer.

        One buffer per camera (shared memory inside a loader worker, as collation's would
        be): collate_samples hands it on as the batch's, so a batch's images are written
        once instead of decoded and then stacked. The DataLoader calls it for a batch. The
        samples' images are views of those buffers (a sample kept keeps its batch's). A
        subclass that overrides `__getitem__` is read through it, a sample at a time.
        """
        if type(self).__getitem__ is not EpisodeDataset.__getitem__:
            return [self[i] for i in indices]
        if not indices:
            return []
        # The buffers are the size the first sample's images decode to (image_size, or its
        # JPEGs' headers), so that it decodes into its slot as the others do. Where its
        # reading faults or a header is unreadable, its stand-in is made first (its size
        # the batch's) and copied into slot 0; a failed decode is remade in its slot.
        samples: list[Sample] = []
        prepared: list[tuple[int, list[torch.Tensor], Sample | None, Callable | None]] = []
        first = self._prepared_or_none(indices[0])
        sizes = self._decoded_sizes(first[1]) if first is not None else None
        if first is None or sizes is None:
            samples.append(self._sample(indices[0]))
            images = [samples[0][f"images.{camera}"] for camera in self.cameras]  # (3, H, W)
            buffers = self._batch_buffers(len(indices), [image.shape[1:] for image in images])
            for camera, image, buffer in zip(self.cameras, images, buffers, strict=True):
                buffer[0].copy_(image.permute(1, 2, 0))
                samples[0][f"images.{camera}"] = buffer[0].permute(2, 0, 1)
        else:
            buffers = self._batch_buffers(len(indices), sizes)
            outs = [buffer[0] for buffer in buffers]
            wait = self.decoder.start(first[1], self.image_size, decode_jpeg, outs)
            prepared.append((indices[0], outs, first[0], wait))
        # Each sample prepared in turn, its cameras decoding (on threads where the decoder
        # has them) while the next is prepared. Faults are then met in the batch's order, as
        # `self[i]` one by one meets them: a sample that faulted, or whose episode an earlier
        # sample's fault dropped, is made again as `self[i]` makes it, replacement and all.
        for slot, index in enumerate(indices[1:], 1):
            outs = [buffer[slot] for buffer in buffers]
            ready = self._prepared_or_none(index)
            if ready is None:
                prepared.append((index, outs, None, None))  # its fault noted below, in turn
                continue
            wait = self.decoder.start(ready[1], self.image_size, decode_jpeg, outs)
            prepared.append((index, outs, ready[0], wait))
        for index, outs, sample, wait in prepared:
            images = wait() if wait is not None else None  # its decodes done before a remake
            samples.append(self._finish(index, outs, sample, images))
        return samples

    def _prepared_or_none(self, index: int) -> tuple[Sample, list[bytes]] | None:
        """`_prepare(index)`, or None where it faults (its fault is met when it is remade)."""
        try:
            return self._prepare(index)
        except SampleFault:
            return None

    def _decoded_sizes(self, jpegs: Sequence[bytes]) -> list[tuple[int, int]] | None:
        """The (H, W) each JPEG decodes to; None where a header it needs cannot be read."""
        sizes = [size for jpeg in jpegs if (size := decoded_size(jpeg, self.image_size))]
        return sizes if len(sizes) == len(jpegs) else None

    def _batch_buffers(self, batch: int, sizes: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """A (batch, H, W, 3) buffer per camera, its (H, W) from `sizes`."""
        return [batch_buffer((batch, int(h), int(w), 3)) for h, w in sizes]

    def _finish(
        self,
        index: int,
        outs: Sequence[torch.Tensor],
        sample: Sample | None,
        images: Sequence[torch.Tensor | Exception] | None,
    ) -> Sample:
        """A prepared sample given its images, or made again as `self[i]` makes it.

        Made again when its preparation or a decode failed, or when its episode was dropped
        since it was prepared (by an earlier sample's fault in the same batch).
        """
        dropped = self._faults.dropped  # mostly empty: no lookup of the sample's episode
        if (
            sample is not None
            and images is not None
            and not (dropped and self.locate(index)[0] in dropped)
        ):
            try:
                self._attach(sample, images)
            except SampleFault:
                pass
            else:
                sample["faults"] = []
                return sample
        return self._sample(index, outs)

    def _sample(self, index: int, outs: Sequence[torch.Tensor] | None = None) -> Sample:
        faults: list[DataFault] = []
        current = index
        for attempt in range(1, _MAX_REPLACEMENTS + 1):
            try:
                sample = self._build(current, outs)
            except SampleFault as exc:
                fault = self._faults.note(exc, self.locate(current)[0])
                if fault is not None:
                    faults.append(fault)
                current = self._faults.replacement(
                    index, attempt, len(self), lambda i: self.locate(i)[0]
                )
                continue
            sample["faults"] = [f.to_dict() for f in faults]
            return sample
        raise NoValidSampleError(
            f"no valid sample found in {_MAX_REPLACEMENTS} tries for sample {index} of "
            f"{len(self)} ({len(self._faults.dropped)} of {len(self.episodes)} episodes dropped);"
            " faults: "
            + "; ".join(str(SampleFault(f)) for f in faults[:5])
            + ". `polymimic-data validate ROOT --deep` lists every bad frame."
        )
