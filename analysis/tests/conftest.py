"""Shared fixtures: a results tree for two machines (the second without bench files),
generated once per session from the seeded generators in fixtures.py, plus a helper that
checks a PNG is real and not blank."""
from __future__ import annotations

import shutil
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from analysis import loaders
from analysis.tests.fixtures import make_results_tree

INTEL = "intel-fam6-mod85-step7-1pkg"
AMD = "amd-fam25-mod1-step1-1pkg"


@pytest.fixture(scope="session")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("checkout")
    make_results_tree(root, INTEL, seed=1)
    make_results_tree(root, AMD, seed=5, bench=False)
    return root


@pytest.fixture
def intel_copy(tree, tmp_path) -> Path:
    """A private copy of the Intel results folder (and its Tmax config) to modify or write into."""
    shutil.copytree(tree / "results" / INTEL, tmp_path / "results" / INTEL)
    shutil.copytree(tree / "configs", tmp_path / "configs")
    return tmp_path / "results" / INTEL


@pytest.fixture(scope="session")
def e2e(tree, tmp_path_factory):
    """`python3 -m analysis <intel folder>` run once, in-process, with default options
    (PNG + SVG into <folder>/plots). Returns the folder, exit code and captured stdout."""
    import contextlib
    import io

    from analysis import cli

    root = tmp_path_factory.mktemp("e2e")
    shutil.copytree(tree / "results" / INTEL, root / "results" / INTEL)
    shutil.copytree(tree / "configs", root / "configs")
    folder = root / "results" / INTEL
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli.main([str(folder)])
    return {"folder": folder, "plots": folder / "plots", "rc": rc, "stdout": out.getvalue()}


@pytest.fixture(scope="session")
def intel_data(tree):
    folder = tree / "results" / INTEL
    return {
        "folder": folder,
        "sweep": loaders.load_sweep(loaders.newest(folder, "sweep")),
        "bench": loaders.load_bench(loaders.newest(folder, "bench")),
        "latency_path": loaders.newest(folder, "latency"),
        "latency": loaders.load_latency_csv(loaders.newest(folder, "latency")),
        "tmax": loaders.load_tmax(tree / "configs" / "tmax" / f"{INTEL}.toml"),
    }


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_distinct_colours(path: Path) -> int:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    pixels = matplotlib.image.imread(path)[::2, ::2]   # every 4th pixel is plenty
    rgb = (pixels[..., :3].reshape(-1, 3) * 255).astype(np.uint32)
    packed = (rgb[:, 0] << 16) | (rgb[:, 1] << 8) | rgb[:, 2]
    return len(np.unique(packed))


def assert_real_png(path: Path) -> None:
    assert path.is_file(), f"{path} was not written"
    assert path.stat().st_size > 5000, f"{path} is suspiciously small"
    assert png_distinct_colours(path) > 5, f"{path} looks blank"
