"""A sample's cameras decoded on threads only where the cores allow, and the same either way."""

from __future__ import annotations

import os
import pickle
import re
import threading

import numpy as np
import pytest
import simplejpeg
import torch

from polymimic_data.samples import CameraDecoder, decode_jpeg, decode_threads, off_boundary
from polymimic_data.samples.jpeg_decode import ALIGNMENT, OFFSET, _address


@pytest.mark.parametrize(
    ("cameras", "cores", "workers", "threads"),
    [
        (3, 2, 2, 1),  # every core has its worker: off
        (3, 2, 1, 1),  # one worker, and training on the other core: off
        (3, 2, 0, 2),  # no workers: the training process decodes, on both cores
        (3, 8, 2, 3),  # five cores spare, two each: one a camera (three)
        (3, 6, 2, 2),  # three spare: one more each
        (1, 16, 1, 1),  # one camera: nothing to share
        (2, 3, 4, 1),  # more workers than cores
    ],
)
def test_decode_threads_by_cameras_cores_and_workers(
    cameras: int, cores: int, workers: int, threads: int
) -> None:
    assert decode_threads(cameras, cores, workers) == threads


def _jpegs(count: int, size: tuple[int, int] = (48, 64)) -> list[bytes]:
    rng = np.random.default_rng(0)
    return [
        simplejpeg.encode_jpeg(rng.integers(0, 255, (*size, 3), dtype=np.uint8), quality=90)
        for _ in range(count)
    ]


def _decoded_on(decoder: CameraDecoder, jpegs: list[bytes]) -> set[int]:
    """The threads `decoder` decoded `jpegs` on."""
    seen = set()

    def decode(data: bytes, size: tuple[int, int] | None) -> torch.Tensor:
        seen.add(threading.get_ident())
        return decode_jpeg(data, size)

    decoder(jpegs, None, decode)
    return seen


def test_only_frames_large_enough_to_gain_are_decoded_on_threads() -> None:
    decoder = CameraDecoder(3, threads=3)
    here = {threading.get_ident()}
    assert _decoded_on(decoder, _jpegs(3, (128, 160))) == here  # a hand-off costs more
    assert _decoded_on(decoder, _jpegs(3, (240, 320))).isdisjoint(here)


def test_threads_decode_as_one_does_and_report_a_bad_jpeg_in_its_place() -> None:
    jpegs = _jpegs(3, (240, 320))  # large enough to go to the threads
    jpegs[1] = b"not a jpeg"
    threaded, serial = CameraDecoder(3, threads=3), CameraDecoder(3, threads=1)
    many, one = threaded(jpegs, (120, 160)), serial(jpegs, (120, 160))
    assert threaded.threads == 3 and serial.threads == 1
    assert isinstance(many[1], Exception) and isinstance(one[1], Exception)
    for i in (0, 2):
        image, alone = many[i], one[i]
        assert isinstance(image, torch.Tensor) and isinstance(alone, torch.Tensor)
        assert torch.equal(image, alone) and torch.equal(image, decode_jpeg(jpegs[i], (120, 160)))
    with pytest.raises(ValueError, match="decode_threads: 1 or more"):
        CameraDecoder(3, threads=0)


def test_the_thread_pool_is_never_pickled_and_made_again_after_a_fork() -> None:
    decoder = CameraDecoder(3, threads=2)
    decoder(_jpegs(2), None)
    assert decoder._pool is not None
    copy = pickle.loads(pickle.dumps(decoder))  # as a loader worker gets it under spawn
    assert copy._pool is None and copy.threads == 0
    assert len(copy(_jpegs(2), None)) == 2 and copy.threads == 2
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a forked worker: its own pool, not the parent's dead threads
        image = decoder(_jpegs(3), None)[2]
        ok = isinstance(image, torch.Tensor) and image.shape == (3, 48, 64)
        ok = ok and decoder._pid == os.getpid()
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"


def test_frames_of_changing_sizes_decode_as_alone_and_a_bad_one_raises_as_simplejpeg(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The next frame is decoded into a buffer the last one's size, without reading its
    header first: a smaller frame after a larger, a larger after a smaller (simplejpeg then
    refuses the buffer, and leaks a decompressor: the guess is off from then on) and a bad
    JPEG between them each come out as decoded alone, or raise as simplejpeg does."""
    from polymimic_data.samples import jpeg_decode

    monkeypatch.setattr(jpeg_decode, "_LAST_NBYTES", {})  # this test's own guesses
    monkeypatch.setattr(jpeg_decode, "_NO_GUESS", set())
    small, large, other = _jpegs(1, (48, 64))[0], _jpegs(1, (96, 128))[0], _jpegs(1, (8, 16))[0]
    alone = {
        jpeg: torch.from_numpy(simplejpeg.decode_jpeg(jpeg, colorspace="RGB")).permute(2, 0, 1)
        for jpeg in (small, large, other)
    }
    key = (0, 0, False)
    with pytest.raises(ValueError) as raised:
        simplejpeg.decode_jpeg(b"\xff\xd8 not a jpeg", colorspace="RGB")
    for jpeg, then in [(large, 96 * 128 * 3), (small, 48 * 64 * 3), (b"\xff\xd8 not a jpeg", None),
                       (small, 48 * 64 * 3), (large, 0), (other, 0), (large, 0)]:  # fmt: skip
        if then is None:
            with pytest.raises(ValueError, match=re.escape(str(raised.value))):
                decode_jpeg(jpeg)
            continue
        assert torch.equal(decode_jpeg(jpeg), alone[jpeg])
        guessed = 0 if key in jpeg_decode._NO_GUESS else jpeg_decode._LAST_NBYTES[key]
        assert guessed == then  # 0: off for good, after a larger frame than guessed


def test_a_frame_decoded_into_a_batch_slot_without_its_header_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch's frame is decoded straight into its slot (`out`). A frame larger than the
    slot (refused) or smaller turns the guess off for good; each comes out as decoded alone,
    in the slot where it is the slot's size (a smaller one upscaled to `size`: resized in)."""
    from polymimic_data.samples import jpeg_decode

    small, large, shorter = (_jpegs(1, size)[0] for size in [(48, 64), (96, 128), (40, 64)])
    # (frame, size asked, decoded in the slot, the guess off after it)
    for steps in (
        [(small, None, True, False), (large, None, False, True), (small, None, True, True)],
        [(small, None, True, False), (shorter, None, False, True), (small, None, True, True)],
        [(small, (96, 128), True, True), (large, (96, 128), True, True)],  # upscaled, resized in
    ):
        monkeypatch.setattr(jpeg_decode, "_NO_GUESS", set())
        monkeypatch.setattr(jpeg_decode, "_LAST_NBYTES", {})
        for jpeg, size, into, off in steps:
            out = torch.zeros((*(size or (48, 64)), 3), dtype=torch.uint8)
            image = decode_jpeg(jpeg, size, out)
            assert torch.equal(image, decode_jpeg(jpeg, size))  # as alone, without a slot
            assert (image.data_ptr() == out.data_ptr()) == into
            assert ((*(size or (0, 0)), size is not None) in jpeg_decode._NO_GUESS) == off


@pytest.mark.parametrize("nbytes", [1, 3 * 128 * 160, 3 * 480 * 640 + 5])
def test_decodes_go_into_memory_16_bytes_past_a_32_byte_boundary(nbytes: int) -> None:
    """off_boundary's memory: libjpeg-turbo's SIMD writes a row on a 32-byte boundary with
    stores that bypass the cache; 16 bytes past one, it writes through the cache."""
    for _ in range(20):  # whatever the allocator hands out
        buffer = off_boundary(nbytes)
        assert buffer.nbytes == nbytes and buffer.flags.writeable
        assert buffer.ctypes.data % ALIGNMENT == OFFSET == 16


def test_an_arrays_address_is_where_its_memory_starts() -> None:
    """off_boundary's `_address`, at every offset into a buffer, is numpy's own."""
    base = np.empty(4096 + 64, dtype=np.uint8)
    for k in range(32):
        view = base[k : k + 4096]
        assert _address(view) == view.ctypes.data, k
