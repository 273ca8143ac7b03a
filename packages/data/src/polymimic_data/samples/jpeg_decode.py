"""JPEG decoding straight to the model's resolution, as uint8 (3, H, W).

A sample's cameras are decoded on threads where that is faster (CameraDecoder):
libjpeg-turbo releases the GIL, so a worker with cores to spare decodes three cameras in
about the time of two, or one; a batch read at once (EpisodeDataset.__getitems__) hands
every frame of the batch to the threads as its sample is prepared (CameraDecoder.start),
so they are not idle while a sample's slowest camera finishes or the next is read.

Small frames are not decoded on threads: a 128x160 JPEG decodes in about 50 us, what
handing it to a thread and back costs, and three of them took 2.2x as long on threads as in
turn (benchmarks/loader.py --episodes; 2 cores, busy), so frames under MIN_THREADED_PIXELS
decode in turn whatever the cores.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import simplejpeg
import torch

from polymimic_data.samples.image_resize import resize_uint8

MIN_THREADED_PIXELS = 240 * 320  # a smaller frame decodes faster than a thread hand-off


ALIGNMENT, OFFSET = 32, 16  # decode into memory OFFSET bytes past an ALIGNMENT boundary


def off_boundary(nbytes: int) -> np.ndarray:
    """`nbytes` of fresh memory that start OFFSET (16) bytes past an ALIGNMENT (32) boundary.

    libjpeg-turbo's SIMD colour conversion writes an output row that starts on a 32-byte
    boundary with non-temporal stores, which go around the cache to memory: a 128x160
    frame then takes about 1.8x as long to decode, and collation reads it right back.
    Whether a buffer of numpy's own starts on such a boundary is the allocator's chance.
    """
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    start = (OFFSET - _address(raw)) % ALIGNMENT
    return raw[start : start + nbytes]


def _address(array: np.ndarray) -> int:
    """Where a writable `array`'s memory starts: `array.ctypes.data`, a quarter of the cost.

    0.6 us, not 2.1 (that builds a ctypes helper object; `python -m timeit` on a 2-core VM):
    it is paid for every frame decoded.
    """
    return ctypes.addressof(ctypes.c_char.from_buffer(array))  # pyright: ignore[reportArgumentType]


# The bytes of the last image decoded with the same (min height, min width, fastdct), so
# the next is decoded straight into a buffer that size, without parsing its header first
# (what the decode then parses again). A too-small buffer costs simplejpeg 1.9 a
# decompressor it never frees (it raises before destroying it), so a key whose image came
# out larger than guessed goes into _NO_GUESS for good: a leak or so a key a process (a
# few if threads raced). A smaller image is harmless: it lives in the larger buffer (until
# collation copies it) and the next guess is its size. Frames of one size, the usual case
# (a dataset's cameras decoded to one `image_size`), keep the guess.
_LAST_NBYTES: dict[tuple[int, int, bool], int] = {}
_NO_GUESS: set[tuple[int, int, bool]] = set()


def _rgb(data: bytes, height: int, width: int, fastdct: bool, buffer: Any = None) -> np.ndarray:
    """simplejpeg.decode_jpeg to RGB, at least `height` x `width`, into `buffer` if given."""
    return simplejpeg.decode_jpeg(data, colorspace="RGB", fastdct=fastdct, min_height=height,
                                  min_width=width, buffer=buffer)  # fmt: skip


def _decode_rgb(data: bytes, height: int = 0, width: int = 0, fastdct: bool = False) -> np.ndarray:
    """An RGB decode by simplejpeg, into a buffer off the 32-byte boundary (see above)."""
    key = (height, width, fastdct)
    guess = _LAST_NBYTES.get(key) if key not in _NO_GUESS else None
    if guess is not None:
        try:
            image = _rgb(data, height, width, fastdct, off_boundary(guess))
        except Exception:  # a buffer too small, or a bad JPEG: sized by its header below
            pass
        else:
            if image.nbytes != guess:  # a smaller image: the next buffer its size
                _LAST_NBYTES[key] = image.nbytes
            return image
    try:
        out_height, out_width, _, _ = simplejpeg.decode_jpeg_header(
            data, min_height=height, min_width=width
        )
        nbytes = int(out_height) * int(out_width) * 3
        if guess is not None and nbytes > guess:
            _NO_GUESS.add(key)
        elif key not in _NO_GUESS:
            _LAST_NBYTES[key] = nbytes
        return _rgb(data, height, width, fastdct, off_boundary(nbytes))
    except Exception:  # a bad JPEG: decoded again, to raise what simplejpeg raises for it
        return _rgb(data, height, width, fastdct)


def decode_jpeg(
    data: bytes, size: tuple[int, int] | None = None, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Decode one JPEG to a uint8 (3, H, W) tensor.

    With `size` (H, W) smaller than the image, libjpeg-turbo scales in the DCT domain
    to the smallest power-of-two reduction that is still at least `size`, and only the
    remainder (if any) is resized. The full-size image is never materialised.

    `out`: a contiguous uint8 (H, W, 3) tensor to decode into (a slot of a batch's buffer),
    the result then a (3, H, W) view of it; used only where the image comes out that size.
    """
    if out is not None:
        into = _decode_into(data, size, out)
        if into is not None:
            return into
    if size is None:
        image = _decode_rgb(data)
    else:
        height, width = size
        image = _decode_rgb(data, height, width, fastdct=True)
    # The CHW view made in numpy: the same tensor as torch's permute, at half the cost.
    tensor = torch.from_numpy(np.ascontiguousarray(image).transpose(2, 0, 1))
    if size is not None and tuple(tensor.shape[1:]) != tuple(size):
        tensor = resize_uint8(tensor, size)
    return tensor  # a (3, H, W) view of HWC memory: collation's stack copies it (a batch
    # read at once decodes into its batch's buffer instead: `out`)


def _decode_into(
    data: bytes, size: tuple[int, int] | None, out: torch.Tensor
) -> torch.Tensor | None:
    """decode_jpeg into `out`; None where the image does not come out `out`'s size."""
    height, width = size if size is not None else (0, 0)
    key = (height, width, size is not None)
    if key not in _NO_GUESS:  # straight into `out` without its header first (_LAST_NBYTES)
        try:
            image = _rgb(data, height, width, size is not None, out.numpy())
        except Exception:  # larger than `out`, or a bad JPEG: its header says which below
            pass
        else:
            if image.shape == out.shape:
                return out.permute(2, 0, 1)
            # Smaller, at the front of `out` (a frame upscaled to `size`, or a smaller camera):
            # decoded again below, and these options guessed no more (each would be twice).
            _NO_GUESS.add(key)
    try:
        scaled = simplejpeg.decode_jpeg_header(data, min_height=height, min_width=width)[:2]
    except Exception:  # a bad JPEG: decode_jpeg's own path raises what simplejpeg raises
        return None
    if key not in _NO_GUESS and int(scaled[0]) * int(scaled[1]) * 3 > out.numel():
        _NO_GUESS.add(key)  # it refused `out` (and leaked): these options are guessed no more
    if tuple(out.shape) != (*(size or scaled), 3):
        return None
    if tuple(scaled) == tuple(out.shape[:2]):  # straight into it
        _rgb(data, height, width, size is not None, out.numpy())
    else:  # a remainder to resize: the resized image copied in
        out.copy_(decode_jpeg(data, size).permute(1, 2, 0))
    return out.permute(2, 0, 1)


def decode_threads(cameras: int, cores: int, workers: int) -> int:
    """Threads to decode one sample's `cameras` with, in one of a loader's `workers`.

    The training process keeps a core; each worker has its own, and the cores left over are
    shared out among the workers as threads, up to one a camera. One thread (off) for one
    camera, or where the workers and the training process already take every core.
    `workers` 0: the process that trains decodes too (no loader workers): every core.
    """
    share = cores if workers == 0 else 1 + max(0, cores - 1 - workers) // workers
    return max(1, min(cameras, share))


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# This process's id, kept by a fork hook (CameraDecoder asks at every sample; a system call).
_PROCESS = [os.getpid()]
if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=lambda: _PROCESS.__setitem__(0, os.getpid()))


def _loader_workers() -> int:
    """The DataLoader workers this process is one of (0 outside one)."""
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    return info.num_workers if info is not None else 0


class CameraDecoder:
    """A sample's JPEGs decoded to (3, H, W) uint8, on threads where that is faster.

    On threads: with more than one (below) and a frame of MIN_THREADED_PIXELS or more.

    `threads` None: decode_threads(cameras, this process's cores, its loader's workers),
    decided in the process that decodes (a loader worker knows how many it is one of).
    The thread pool belongs to that process: it is neither pickled nor inherited by a fork.
    """

    def __init__(self, cameras: int, threads: int | None = None) -> None:
        if threads is not None and threads < 1:
            raise ValueError(f"decode_threads: 1 or more (or None: by the cores), got {threads}")
        self.cameras, self.requested = cameras, threads
        self._pool: ThreadPoolExecutor | None = None
        self._pid: int | None = None
        self.threads = 0  # decided on first use

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pool": None, "_pid": None, "threads": 0}

    def _executor(self) -> ThreadPoolExecutor | None:
        if self._pid != _PROCESS[0]:  # first use here, or a fork of a process that used it
            self.threads = self.requested or decode_threads(
                self.cameras, _cores(), _loader_workers()
            )
            self._pool = ThreadPoolExecutor(self.threads) if self.threads > 1 else None
            self._pid = _PROCESS[0]
        return self._pool

    def __call__(
        self,
        jpegs: Sequence[bytes],
        size: tuple[int, int] | None,
        decode: Callable[..., torch.Tensor] = decode_jpeg,
        outs: Sequence[torch.Tensor] | None = None,
    ) -> list[torch.Tensor | Exception]:
        """Each JPEG decoded by `decode`, or the exception it raised, in order.

        `outs`: where each goes (decode_jpeg's `out`), one per JPEG.
        """
        if self._executor() is None:  # a loader worker's usual case: a core each, no threads
            return _in_turn(decode, jpegs, size, outs)  # (without start's plumbing)
        return self.start(jpegs, size, decode, outs, alone=True)()

    def start(
        self,
        jpegs: Sequence[bytes],
        size: tuple[int, int] | None,
        decode: Callable[..., torch.Tensor] = decode_jpeg,
        outs: Sequence[torch.Tensor] | None = None,
        *,
        alone: bool = False,
    ) -> Callable[[], list[torch.Tensor | Exception]]:
        """Start decoding as `__call__` does; the function that waits for its results.

        On threads, the caller goes on meanwhile (a batch read at once prepares its next
        sample while this one's cameras decode, and all of a batch's frames share the
        threads); in turn, they are decoded before this returns. `alone`: a sample's
        JPEGs waited for at once, in turn where there is only one.
        """
        pool = self._executor()
        # (in that order: the frames' headers are parsed only where there are threads to use)
        if (
            pool is None
            or (alone and len(jpegs) < 2)
            or not jpegs
            or max(map(_pixels, jpegs)) < MIN_THREADED_PIXELS
        ):
            done = _in_turn(decode, jpegs, size, outs)
            return lambda: done
        into = list(outs) if outs is not None else [None] * len(jpegs)
        futures = [pool.submit(_decode_one, decode, data, size, out)
                   for data, out in zip(jpegs, into, strict=True)]  # fmt: skip
        return lambda: [future.result() for future in futures]


def _in_turn(
    decode: Callable[..., torch.Tensor],
    jpegs: Sequence[bytes],
    size: tuple[int, int] | None,
    outs: Sequence[torch.Tensor] | None,
) -> list[torch.Tensor | Exception]:
    """Each of `jpegs` decoded here, one after the other (_decode_one's results)."""
    if outs is None:
        return [_decode_one(decode, data, size, None) for data in jpegs]
    return [_decode_one(decode, data, size, out) for data, out in zip(jpegs, outs, strict=True)]


def _decode_one(
    decode: Callable[..., torch.Tensor],
    data: bytes,
    size: tuple[int, int] | None,
    out: torch.Tensor | None,
) -> torch.Tensor | Exception:
    """`decode`'s image of `data`, or the exception it raised (its caller names the camera)."""
    try:
        return decode(data, size) if out is None else decode(data, size, out)
    except Exception as exc:
        return exc


def decoded_size(data: bytes, size: tuple[int, int] | None) -> tuple[int, int] | None:
    """The (H, W) decode_jpeg makes of `data`: `size` where given, else the JPEG's own.

    None where its header cannot be read (its decode reports why).
    """
    if size is not None:
        return size
    try:
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    except Exception:
        return None
    return int(height), int(width)


def _pixels(data: bytes) -> int:
    """A JPEG's stored height x width, from its header (0 when it has none)."""
    stored = decoded_size(data, None)  # None for a bad JPEG: its decode reports it
    return stored[0] * stored[1] if stored is not None else 0
