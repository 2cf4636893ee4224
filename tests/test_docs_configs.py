"""Every method page in ``docs/methods/`` names every config of its method (issue 29, item 8:
CRCL's page did not list ``crcl_vse_*``). Brace patterns as the pages write them
(``configs/crcl_vse_{f30k,coco,cc152k}.yaml``) are expanded."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from ncl.methods.declaration import doc_pages

REPO = Path(__file__).resolve().parents[1]
#: page -> config-name prefixes it documents: what each method class declares (``spec.page``,
#: ``spec.config_prefixes``, :mod:`ncl.methods.declaration`).
PAGES = doc_pages()


def expand(pattern: str) -> set[str]:
    """``a_{x,y}_b{1,2}`` -> ``{a_x_b1, a_x_b2, a_y_b1, a_y_b2}``."""
    parts = re.split(r"\{([^{}]*)\}", pattern)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return {"".join(c) for c in itertools.product(*choices)}


def named_configs(text: str) -> set[str]:
    """Config names a page mentions: ``name.yaml`` (braces expanded) or a bare config name."""
    names: set[str] = set()
    for match in re.finditer(r"([A-Za-z0-9_{},]+)\.yaml", text):
        names |= {n.rsplit("/", 1)[-1] for n in expand(match.group(1))}
    return names


def test_expand_braces() -> None:
    assert expand("crcl_vse_{f30k,coco}") == {"crcl_vse_f30k", "crcl_vse_coco"}
    assert named_configs("see `configs/a_{x,y}.yaml` and b.yaml") == {"a_x", "a_y", "b"}


@pytest.mark.parametrize("page", sorted(PAGES))
def test_method_page_names_every_config(page: str) -> None:
    text = (REPO / "docs" / "methods" / page).read_text()
    configs = {p.stem for p in (REPO / "configs").glob("*.yaml") if p.stem.startswith(PAGES[page])}
    assert configs, f"no configs for {page}"
    missing = sorted(configs - named_configs(text))
    assert missing == [], f"docs/methods/{page} does not name {missing}"


def test_lnc_learning_rate_is_labelled_as_ncl_choice() -> None:
    """LNC states no learning rate for image-text matching; its 2e-4 is NCR's, ncl's choice."""
    text = " ".join((REPO / "docs" / "methods" / "ncr_lnc.md").read_text().split())
    assert "its 2e-4 is **ncl's choice**" in text
