"""Find and import an environment folder (``images/<name>/env.py`` plus ``seed.json``)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys
from functools import cache
from pathlib import Path

from envreg.config import foreign_code_allowed, images_root
from envreg.env.environment import Environment
from envreg.errors import EnvironmentNotFound, ForeignCode
from envreg.protocol import FOREIGN_MARKER


def resolve_folder(ref: str | os.PathLike[str]) -> Path:
    """A folder path, or a name under the images root."""
    path = Path(ref)
    for candidate in (path, images_root() / str(ref)):
        if (candidate / "env.py").is_file():
            return candidate.resolve()
    raise EnvironmentNotFound(
        f"no environment {str(ref)!r}: expected a folder with an env.py, or a name under {images_root()}/"
        f" (known: {', '.join(known_names()) or 'none'})"
    )


def known_names() -> list[str]:
    root = images_root()
    return sorted(p.parent.name for p in root.glob("*/env.py")) if root.is_dir() else []


class SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Compiles env.py from its source every time: a bytecode cache beside it is never trusted, so the code
    that runs is the code the manifest's source digest covers."""

    def get_code(self, fullname: str):  # type: ignore[override]
        return self.source_to_code(self.get_data(self.path), self.path)


def is_foreign(folder: Path) -> bool:
    """Whether the folder holds foreign code (an imported tool file), which runs only in a container sandbox."""
    return (folder / FOREIGN_MARKER).is_file()


@cache
def _load(folder: Path) -> Environment:
    if is_foreign(folder) and not foreign_code_allowed():
        raise ForeignCode(
            f"{folder.name} is a foreign environment ({folder / FOREIGN_MARKER}): envreg runs its code only "
            "in a container sandbox, never on this host",
            f"build its image (`envreg build {folder.name}`; `envreg manifest` and `envreg build` inspect it in a "
            "sandbox) and use a container or instance sandbox; ENVREG_FOREIGN_CODE=allow imports it here, for code "
            "you trust",
        )
    module_name = f"envreg_env_{folder.name}_{abs(hash(folder)):x}"
    path = str(folder / "env.py")
    spec = importlib.util.spec_from_file_location(
        module_name, path, loader=SourceOnlyLoader(module_name, path)
    )
    if spec is None or spec.loader is None:
        raise EnvironmentNotFound(f"cannot import {folder / 'env.py'}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    env = getattr(module, "env", None)
    if not isinstance(env, Environment):
        raise EnvironmentNotFound(f"{folder / 'env.py'} defines no `env = Environment(...)`")
    seed = folder / "seed.json"
    if seed.is_file():
        env.seed = json.loads(seed.read_text())
    env.folder = folder
    return env


def load_environment(ref: str | os.PathLike[str]) -> Environment:
    """Import the environment at `ref` (a folder or a name); imported once per process."""
    return _load(resolve_folder(ref))
