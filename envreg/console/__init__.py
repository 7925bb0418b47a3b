"""The web console: server-rendered pages over the catalog, the daemon's sandboxes, trajectory files and
validation reports, served by `envreg serve` at ``/ui`` and exported as static files by `envreg report --html`.

Every asset lies in this package (``templates/``, ``static/``); nothing is loaded from the internet.
"""
