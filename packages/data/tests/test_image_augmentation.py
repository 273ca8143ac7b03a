from __future__ import annotations

import pytest
import torch

from polymimic_data.samples.image_augmentation import ImageAugmentation


def _images(b: int = 6) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (b, 3, 24, 32), dtype=torch.uint8, generator=g)


def test_eval_mode_leaves_images_untouched() -> None:
    images = _images()
    assert torch.equal(ImageAugmentation().eval()(images), images)


def test_every_sample_gets_its_own_parameters_in_one_call() -> None:
    images = _images(1).expand(8, -1, -1, -1).contiguous()  # eight copies of one image
    out = ImageAugmentation()(images, torch.Generator().manual_seed(1))
    assert out.dtype == torch.uint8 and out.shape == images.shape
    distinct = {tuple(o.flatten()[:64].tolist()) for o in out}
    assert len(distinct) == 8


def test_seeded_calls_repeat_and_identity_settings_change_nothing() -> None:
    images = _images()
    aug = ImageAugmentation()
    a = aug(images, torch.Generator().manual_seed(3))
    b = aug(images, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    identity = ImageAugmentation(crop_scale=(1.0, 1.0), brightness=0, contrast=0, saturation=0)
    assert (identity(images).int() - images.int()).abs().max() <= 1


def test_brightness_moves_the_mean_within_its_range() -> None:
    images = torch.full((64, 3, 8, 8), 100, dtype=torch.uint8)
    out = ImageAugmentation(crop_scale=(1.0, 1.0), brightness=0.5, contrast=0, saturation=0)(images)
    means = out.float().mean((1, 2, 3))
    assert means.min() >= 49 and means.max() <= 151 and means.std() > 10


def test_bad_input_is_refused() -> None:
    with pytest.raises(TypeError, match="uint8"):
        ImageAugmentation()(torch.zeros(2, 3, 8, 8))
    with pytest.raises(ValueError, match="crop_scale"):
        ImageAugmentation(crop_scale=(0.0, 1.0))
