"""The wheel carries the catalog: `build_py` copies the checkout's environment folders (`images/`), their
manifests (`manifests/`) and the bake file into the package as `envreg/_catalog/`, so that a wheel install
finds environments and builds their images without a checkout (`envreg.resources`).

Editable installs copy nothing: there the checkout's own folders are the catalog. Everything else about the
package is in pyproject.toml.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from envreg.resources import CATALOG_PACKAGE, catalog_files  # noqa: E402


class build_py_with_catalog(build_py):
    """`build_py`, plus the catalog under `<build>/envreg/_catalog/`."""

    def run(self) -> None:
        super().run()
        if self.editable_mode or not (ROOT / "images").is_dir():
            return  # an editable install reads the checkout; the images' own wheel needs no catalog
        target = Path(self.build_lib, *CATALOG_PACKAGE.split("."))
        shutil.rmtree(target, ignore_errors=True)
        for relative, source in catalog_files(ROOT).items():
            destination = target / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, destination)


setup(cmdclass={"build_py": build_py_with_catalog})
