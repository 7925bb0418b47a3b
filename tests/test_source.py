"""The environment's source: one definition for the manifest's digest, the image build and verification."""

from __future__ import annotations

import importlib.util
import json
import py_compile
import shutil
from pathlib import Path

import pytest
from conftest import ROOT

from envreg.env import load_environment
from envreg.env.loader import _load
from envreg.images import ImageBuildError, Paths, stage_env
from envreg.manifest import MANIFEST_SCHEMA_VERSION, Manifest, build_manifest, check_manifest, write_manifest
from envreg.source import source_digest, source_hashes


@pytest.fixture
def calendar_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "images" / "calendar"
    shutil.copytree(ROOT / "images" / "calendar", folder, ignore=shutil.ignore_patterns("__pycache__"))
    yield folder
    _load.cache_clear()


def test_the_digest_covers_every_shipped_file_and_nothing_else(calendar_copy: Path) -> None:
    (calendar_copy / "__pycache__").mkdir()
    (calendar_copy / "__pycache__" / "env.cpython-311.pyc").write_bytes(b"bytecode")
    (calendar_copy / "stray.pyc").write_bytes(b"bytecode")
    (calendar_copy / "manifest.json").write_text("{}")
    (calendar_copy / "notes.md").write_text("shipped too")
    manifest = build_manifest(load_environment(calendar_copy))
    expected = {
        p.relative_to(calendar_copy).as_posix()
        for p in calendar_copy.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc" and p.name != "manifest.json"
    }
    assert set(manifest.source_files) == expected
    assert {"env.py", "seed.json", "notes.md"} <= expected and any(
        p.startswith("scenarios/") for p in expected
    )
    assert manifest.digests.source == source_digest(source_hashes(calendar_copy))
    manifest.verify()


def test_any_change_to_the_code_is_a_new_manifest(calendar_copy: Path, tmp_path: Path) -> None:
    out = tmp_path / "manifests"
    _, first, _ = write_manifest(load_environment(calendar_copy), out)
    env_py = calendar_copy / "env.py"
    env_py.write_text(env_py.read_text() + "\n# a comment changes no schema, but it is other code\n")
    _load.cache_clear()
    env = load_environment(calendar_copy)
    problem = check_manifest(env, out)
    assert problem is not None and "source changed" in problem and "tools changed" not in problem, problem
    second = build_manifest(env)
    assert second.digests.tools == first.digests.tools
    assert second.digests.source != first.digests.source
    assert second.digest != first.digest


def test_a_manifest_must_agree_with_its_own_source_list() -> None:
    manifest = build_manifest(load_environment("bank"))
    data = json.loads(manifest.dumps())
    data["source_files"]["env.py"] = "0" * 64
    with pytest.raises(ValueError, match=r"digests.source .* does not match its source_files"):
        Manifest.model_validate(data).verify()
    data = json.loads(manifest.dumps())
    data["schema_version"] = 1
    with pytest.raises(ValueError, match=f"format version 1, this envreg reads {MANIFEST_SCHEMA_VERSION}"):
        Manifest.model_validate(data).verify()


def test_the_build_stages_exactly_the_source_files(calendar_copy: Path, tmp_path: Path) -> None:
    (calendar_copy / "__pycache__").mkdir()
    (calendar_copy / "__pycache__" / "junk.pyc").write_bytes(b"x")
    paths = Paths(tmp_path / "checkout")
    (paths.base_dir).mkdir(parents=True)
    shutil.copy(ROOT / "images" / "base" / "env.Dockerfile", paths.base_dir / "env.Dockerfile")
    path, manifest, _ = write_manifest(load_environment(calendar_copy), tmp_path / "manifests")
    staged = stage_env(paths, "calendar", calendar_copy, path, epoch=86400)
    files = {p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file()}
    assert files == {"Dockerfile", "manifest.json", *(f"env/{rel}" for rel in manifest.source_files)}
    assert source_hashes(staged / "env") == manifest.source_files

    (calendar_copy / "seed.json").write_text((calendar_copy / "seed.json").read_text() + " ")
    with pytest.raises(ImageBuildError, match=r"seed.json was changed .*envreg manifest calendar"):
        stage_env(paths, "calendar", calendar_copy, path, epoch=86400)


def test_bytecode_beside_env_py_is_never_run(calendar_copy: Path) -> None:
    """A tampered `__pycache__` (unchecked-hash pyc, as compileall writes them) must not replace env.py."""
    env_py = calendar_copy / "env.py"
    original = env_py.read_text()
    env_py.write_text(original.replace('"A personal calendar: ', '"TAMPERED ', 1))
    pyc = importlib.util.cache_from_source(str(env_py))
    py_compile.compile(
        str(env_py), cfile=pyc, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
    )
    env_py.write_text(original)
    env = load_environment(calendar_copy)
    assert env.description.startswith("A personal calendar: "), "the bytecode cache was run instead of env.py"


def test_a_same_size_edit_gets_a_new_mtime_so_buildkit_sends_it_again(
    calendar_copy: Path, tmp_path: Path
) -> None:
    """BuildKit re-sends a context file only when its size or mtime changed."""
    from envreg.images.bake import content_mtime

    paths = Paths(tmp_path / "checkout")
    paths.base_dir.mkdir(parents=True)
    shutil.copy(ROOT / "images" / "base" / "env.Dockerfile", paths.base_dir / "env.Dockerfile")
    out = tmp_path / "manifests"
    path, _, _ = write_manifest(load_environment(calendar_copy), out)
    staged = stage_env(paths, "calendar", calendar_copy, path, epoch=86400)
    before = {p: (p.stat().st_size, p.stat().st_mtime) for p in staged.rglob("*") if p.is_file()}

    env_py = calendar_copy / "env.py"
    text = env_py.read_text()
    env_py.write_text(text.replace("calendar", "calendaR", 1))  # same size, other code
    _load.cache_clear()
    write_manifest(load_environment(calendar_copy), out)
    staged = stage_env(paths, "calendar", calendar_copy, path, epoch=86400)
    for name in ("env/env.py", "manifest.json"):
        f = staged / name
        size, mtime = before[f]
        assert f.stat().st_size == size, "the edit kept the size"
        assert f.stat().st_mtime != mtime and f.stat().st_mtime == content_mtime(f.read_bytes(), 86400)
    assert (staged / "env" / "seed.json").stat().st_mtime == before[staged / "env" / "seed.json"][1]
