# One environment image (bake target `env-<name>`, tagged envreg/<name>:<version>): the environment folder at /env,
# its generated manifest at /env/manifest.json, served by `envreg serve-env` as uid 65534. The build context is
# .cache/bake/env/<name> (env/, manifest.json, this file), staged by `envreg build`; labels come from the bake file.
# /env holds exactly the files the manifest's source_files lists (envreg pull and the runtime check it), and no
# bytecode: the server compiles env.py from source at start (about 15 ms), so the code that runs is the code checked.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ARG SOURCE_DATE_EPOCH=0
COPY env/ /env/
COPY manifest.json /env/manifest.json
RUN find /env -newermt @1 -exec touch -h -d "@${SOURCE_DATE_EPOCH}" {} +
ENV ENVREG_ENV=/env \
    ENVREG_MANIFEST=/env/manifest.json
USER 65534:65534
WORKDIR /env
EXPOSE 8000 8001
ENTRYPOINT ["envreg", "serve-env", "/env", "--host", "0.0.0.0", "--port", "8000", "--control-port", "8001"]
