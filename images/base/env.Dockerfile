# One environment image (bake target `env-<name>`, tagged envreg/<name>:<version>): the environment folder at /env,
# its generated manifest at /env/manifest.json, served by `envreg serve-env` as uid 65534. The build context is
# .cache/bake/env/<name> (env/, manifest.json, this file), staged by `envreg build`; labels come from the bake file.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ARG SOURCE_DATE_EPOCH=0
# An environment folder may pin extra wheels in its own requirements.lock (staged into wheels/): they are
# installed offline, hash-checked and without dependencies into the server's venv.
RUN --mount=type=bind,target=/ctx \
    set -eu; \
    if [ -f /ctx/env/requirements.lock ]; then \
        /opt/envreg/bin/python "$(ls /usr/share/python-wheels/pip-*.whl)/pip" install --isolated \
            --disable-pip-version-check --no-cache-dir --no-index --no-deps --no-compile --require-hashes \
            --find-links /ctx/wheels -r /ctx/env/requirements.lock; \
        PYTHONHASHSEED=0 python3 -m compileall -q -j 0 --invalidation-mode unchecked-hash /opt/envreg/lib >/dev/null; \
        find /opt/envreg -newermt "@${SOURCE_DATE_EPOCH}" -exec touch -h -d "@${SOURCE_DATE_EPOCH}" {} +; \
    fi
COPY env/ /env/
COPY manifest.json /env/manifest.json
RUN PYTHONHASHSEED=0 python3 -m compileall -q --invalidation-mode unchecked-hash /env >/dev/null \
    && find /env -newermt @1 -exec touch -h -d "@${SOURCE_DATE_EPOCH}" {} +
ENV ENVREG_ENV=/env \
    ENVREG_MANIFEST=/env/manifest.json
USER 65534:65534
WORKDIR /env
EXPOSE 8000 8001
ENTRYPOINT ["envreg", "serve-env", "/env", "--host", "0.0.0.0", "--port", "8000", "--control-port", "8001"]
