"""Error text as an HTTP client may read it: the host's absolute paths named from neutral roots."""

from __future__ import annotations

import contextlib
import functools
import os
import re


def public_text(text: str) -> str:
    """`text` as an HTTP client may read it: every absolute path under one of this host's known roots named
    from a neutral one instead, so that no error body shows the host's layout. The CLI prints messages as
    they are (its user is on the host); every server passes the error text it sends through here
    (`EnvregError.to_json`, `envreg.http.errors.error_body`, the fronts' own error helpers).

    | root | named |
    | --- | --- |
    | ``$ENVREG_HOME`` (snapshots, the index, caches) | ``$ENVREG_HOME`` |
    | the environment folders (`envreg.config.images_root`) | ``images`` |
    | the manifests (`envreg.config.manifests_root`) | ``manifests`` |
    | the envreg package | ``envreg`` |
    | the Python installation: its standard library, its site-packages, ``sys.prefix`` | ``<stdlib>``, ``<site-packages>``, ``<python>`` |
    | the working directory | ``.`` |
    | the temp folder (`tempfile.gettempdir`) | ``$TMPDIR`` |
    | the user's home folder | ``~`` |

    The longest root wins (``$ENVREG_HOME/snapshots/ab.json`` for a home under the temp folder), and a
    root matches whole path components only (``/tmpx`` is not under ``/tmp``). Never raises: a root that
    cannot be found is left out.
    """
    if "/" not in text:
        return text
    pattern, names = _roots_pattern(_configured_roots())
    return pattern.sub(lambda match: names[match.group(0)], text) if names else text


def _configured_roots() -> tuple[tuple[str, str], ...]:
    """The roots that follow the configuration and the working directory, read on every call (cheap)."""
    from envreg import config

    roots = (
        (config.home_path, "$ENVREG_HOME"),
        (config.images_root, "images"),
        (config.manifests_root, "manifests"),
        (os.getcwd, "."),
        (lambda: os.path.expanduser("~"), "~"),
    )
    found = []
    for where, name in roots:
        try:
            found.append((os.path.abspath(where()), name))
        except (OSError, RuntimeError):  # no working directory, no home
            continue
    return tuple(found)


@functools.lru_cache(maxsize=32)
def _roots_pattern(configured: tuple[tuple[str, str], ...]) -> tuple[re.Pattern[str], dict[str, str]]:
    """A pattern matching every known root (the longest first) and the neutral name of each of its spellings."""
    names: dict[str, str] = {}
    for root, name in (*configured[:3], *_fixed_roots(), *configured[3:]):  # earlier names win a tie
        spellings = {root}
        with contextlib.suppress(OSError, RuntimeError):
            spellings.add(os.path.realpath(root))
        for spelling in spellings:
            if len(spelling) > 1 and spelling not in names:  # never "/" itself
                names[spelling] = name
    alternatives = "|".join(re.escape(root) for root in sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![\w.~-])(?:{alternatives})(?![\w.~-])"), names


@functools.cache
def _fixed_roots() -> tuple[tuple[str, str], ...]:
    """The roots of this process that never move: the envreg package, the Python installation, the temp folder."""
    import sys
    import sysconfig
    import tempfile

    paths = sysconfig.get_paths()
    roots = [
        (os.path.dirname(os.path.abspath(__file__)), "envreg"),
        (paths.get("stdlib", ""), "<stdlib>"),
        (paths.get("purelib", ""), "<site-packages>"),
        (paths.get("platlib", ""), "<site-packages>"),
        (sys.prefix, "<python>"),
        (sys.exec_prefix, "<python>"),
        (tempfile.gettempdir(), "$TMPDIR"),
    ]
    return tuple((os.path.abspath(root), name) for root, name in roots if root)
