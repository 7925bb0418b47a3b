# One environment image (bake target `env-<name>`, tagged envreg/<name>:<version>): the environment folder at /env,
# its generated manifest at /env/manifest.json, served by `envreg serve-env` as uid 65534. The build context is
# .cache/bake/env/<name> (env/, manifest.json, this file), staged by `envreg build`; labels come from the bake file.
# /env holds exactly the files the manifest's source_files lists (envreg pull and the runtime check it), and no
# bytecode: the server compiles env.py from source at start (about 15 ms), so the code that runs is the code checked.
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
RUN find /env -newermt @1 -exec touch -h -d "@${SOURCE_DATE_EPOCH}" {} +
# a foreign environment (an imported tool file, envreg.protocol.FOREIGN_MARKER) is imported only where this is set
ENV ENVREG_ENV=/env \
    ENVREG_MANIFEST=/env/manifest.json \
    ENVREG_FOREIGN_CODE=allow
USER 65534:65534
WORKDIR /env
EXPOSE 8000 8001
# The server's own entry point (`envreg serve-env` without the CLI: it starts in less time)
ENTRYPOINT ["python3", "-m", "envreg.server", "/env", "--host", "0.0.0.0", "--port", "8000", "--control-port", "8001"]
