"""Environment images: the pinned base rootfs, the wheelhouse, the bake definition and the image build.

The pieces, in build order:

1. **Base rootfs** (`base`, `scripts/build-base`): Debian bookworm minbase + python3 via debootstrap, cached
   under `.cache/base/`, normalized into a byte-reproducible tar (sorted, fixed mtime/owner names, no logs,
   caches, machine ids, pyc files or host files) and loaded into the engine as `envreg/base-rootfs:<tar sha256>`
   through a hand-written docker-archive whose config is fixed too, so the image ID is reproducible.
   `images/base/base.lock` (JSON, also read by `docker buildx bake -f`) records the tar sha256, the image
   ID and every installed package version; a rebuild that differs fails and says what Debian changed.
2. **Wheelhouse** (`wheels`, `scripts/lock-wheels`): the server's dependencies (pyproject `dependencies`
   minus `docker`) pinned with hashes in `images/base/requirements.lock`, downloaded on the host into
   `.cache/wheelhouse/`, plus an envreg wheel built on the host; images install them offline
   (`--no-index --require-hashes`).
3. **Bake** (`bake`): `docker-bake.hcl` builds the `base` runtime layer (venv at /opt/envreg) and one
   `env-<name>` target per environment from staged, self-contained contexts under `.cache/bake/`.

`paths` holds the checkout layout and the shared helpers; `cli` is `python -m envreg.images`.
Only the standard library is imported at module level: `scripts/build-base` may run under any python3.
"""

from envreg.images.bake import (
    VENV,
    EnvImage,
    bake_command,
    bake_vars,
    base_tag,
    envreg_version,
    git_facts,
    source_date_epoch,
    stage_base,
    stage_env,
)
from envreg.images.base import (
    INCLUDE,
    MIRROR,
    ROOTFS_ENV,
    ROOTFS_EPOCH,
    ROOTFS_REPO,
    SUITE,
    VARIANT,
    BaseLock,
    build_base_rootfs,
    debootstrap,
    debootstrap_key,
    diff_packages,
    dpkg_packages,
    inspect_id,
    load_rootfs_image,
    normalize_rootfs,
)
from envreg.images.cli import main
from envreg.images.paths import ImageBuildError, Paths, log, paths, repo_root, run, sha256_file
from envreg.images.wheels import (
    EXCLUDED_DEPENDENCIES,
    LockedWheel,
    build_envreg_wheel,
    canonical_name,
    fetch_wheelhouse,
    format_requirements_lock,
    lock_wheels,
    parse_requirements_lock,
    server_requirements,
    wheel_files,
)

__all__ = [
    "EXCLUDED_DEPENDENCIES",
    "INCLUDE",
    "MIRROR",
    "ROOTFS_ENV",
    "ROOTFS_EPOCH",
    "ROOTFS_REPO",
    "SUITE",
    "VARIANT",
    "VENV",
    "BaseLock",
    "EnvImage",
    "ImageBuildError",
    "LockedWheel",
    "Paths",
    "bake_command",
    "bake_vars",
    "base_tag",
    "build_base_rootfs",
    "build_envreg_wheel",
    "canonical_name",
    "debootstrap",
    "debootstrap_key",
    "diff_packages",
    "dpkg_packages",
    "envreg_version",
    "fetch_wheelhouse",
    "format_requirements_lock",
    "git_facts",
    "inspect_id",
    "load_rootfs_image",
    "lock_wheels",
    "log",
    "main",
    "normalize_rootfs",
    "parse_requirements_lock",
    "paths",
    "repo_root",
    "run",
    "server_requirements",
    "sha256_file",
    "source_date_epoch",
    "stage_base",
    "stage_env",
    "wheel_files",
]
