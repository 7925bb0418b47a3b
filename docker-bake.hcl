# envreg images: `base` (the runtime layer) and one `env-<name>` per environment in images/.
#
# Run it through `envreg build [NAMES...]`: that regenerates stale manifests, stages self-contained build
# contexts under .cache/bake/ (wheelhouse, env folders, manifests, fixed mtimes), writes the variables below
# into .cache/bake/vars.json and runs
#   docker buildx bake --load -f docker-bake.hcl -f images/base/base.lock -f .cache/bake/vars.json base
#   docker buildx bake --load -f docker-bake.hcl -f images/base/base.lock -f .cache/bake/vars.json env
# (two steps: with the engine's built-in BuildKit an env image can only use envreg/base once it is loaded).
# images/base/base.lock (JSON, from `scripts/build-base --relock`) sets BASE_IMAGE, the pinned debootstrap rootfs.

variable "BASE_IMAGE" {
  # envreg/base-rootfs:<rootfs tar sha256>; set by images/base/base.lock
  default = ""
}
variable "SOURCE_DATE_EPOCH" {
  default = "0"
}
variable "CREATED" {
  # RFC 3339 form of SOURCE_DATE_EPOCH
  default = "1970-01-01T00:00:00Z"
}
variable "VERSION" {
  # the envreg version (pyproject.toml)
  default = "0.1.0"
}
variable "PREFIX" {
  # the image repository prefix, ending in "/" (ENVREG_IMAGE_PREFIX, see envreg/config.py)
  default = "envreg/"
}
variable "REVISION" {
  default = ""
}
variable "SOURCE" {
  default = ""
}
variable "STAGE" {
  default = ".cache/bake"
}
variable "ENVS" {
  # [{name, version, description, manifest_digest}], one per environment image
  default = []
}

group "default" {
  targets = ["base", "env"]
}

target "_common" {
  args = {
    SOURCE_DATE_EPOCH = SOURCE_DATE_EPOCH
  }
  output = ["type=docker"]
}

target "base" {
  inherits   = ["_common"]
  context    = "${STAGE}/base"
  dockerfile = "Dockerfile"
  args = {
    BASE_IMAGE = BASE_IMAGE
  }
  tags = ["${PREFIX}base:${VERSION}", "${PREFIX}base:latest"]
  labels = {
    "org.opencontainers.image.title"       = "${PREFIX}base"
    "org.opencontainers.image.version"     = VERSION
    "org.opencontainers.image.description" = "envreg runtime: Debian bookworm python3 + the envreg environment server"
    "org.opencontainers.image.created"     = CREATED
    "org.opencontainers.image.source"      = SOURCE
    "org.opencontainers.image.revision"    = REVISION
    "org.opencontainers.image.base.name"   = BASE_IMAGE
  }
}

target "env" {
  name       = "env-${e.name}"
  matrix     = { e = ENVS }
  inherits   = ["_common"]
  context    = "${STAGE}/env/${e.name}"
  dockerfile = "Dockerfile"
  args = {
    BASE_IMAGE = "${PREFIX}base:${VERSION}"
  }
  tags = ["${PREFIX}${e.name}:${e.version}", "${PREFIX}${e.name}:latest"]
  labels = {
    "org.opencontainers.image.title"       = "${PREFIX}${e.name}"
    "org.opencontainers.image.version"     = e.version
    "org.opencontainers.image.description" = e.description
    "org.opencontainers.image.created"     = CREATED
    "org.opencontainers.image.source"      = SOURCE
    "org.opencontainers.image.revision"    = REVISION
    "org.opencontainers.image.base.name"   = "${PREFIX}base:${VERSION}"
    "io.envreg.name"                       = e.name
    "io.envreg.version"                    = e.version
    "io.envreg.manifest.digest"            = e.manifest_digest
  }
}
