"""MSCN's options: one ConfigError naming the option, a non-SGRAF backbone refused, which
epochs may be selected."""

from __future__ import annotations

from functools import partial

import pytest

from ncl.errors import ConfigError
from ncl.methods.mscn import MSCN
from ncl.models import SGRAF, VSEInfinity

TINY = dict(img_dim=16, num_regions=6, word_dim=8, embed_size=16, sim_dim=8)


def make(**options) -> MSCN:
    return MSCN(30, partial(SGRAF, **TINY), **options)


@pytest.mark.parametrize(("option", "value"), [("meta_interval", 0), ("meta_lr", 0.0),
                                               ("p_threshold", 1.0), ("meta_train_images", 0),
                                               ("pseudo_update", "rmsprop"), ("margin_index", "row")])
def test_bad_options_name_themselves(option: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"model.{option}"):
        make(**{option: value})


def test_the_meta_network_needs_sgraf_vectors() -> None:
    with pytest.raises(ConfigError, match="SGRAF backbone"):
        MSCN(30, partial(VSEInfinity, img_dim=16, word_dim=8, embed_size=16))


def test_meta_networks_fit_the_similarity_vectors() -> None:
    method = make(meta_hidden=5)
    assert [m.hidden.in_features for m in method.meta_nets] == [8, 8]
    assert method.meta_nets[0].hidden.out_features == 5


def test_selection_takes_the_last_warmup_epoch_and_every_later_one() -> None:
    method = make(warmup_epochs=3)
    assert [method.selectable(e) for e in range(5)] == [False, False, True, True, True]
