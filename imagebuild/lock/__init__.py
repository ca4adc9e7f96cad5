"""The lock: every external input the matrix names, resolved to an immutable pin with a hash.

One fact per module: `inputs` (what the matrix names, per target and OCI platform, with the matrix values that
decide each pin: no network), `lockfile` (the committed `matrix.lock.json`: read, write, staleness against the
matrix), `images` (tag -> manifest digest per platform through the registry HTTP API; local base images by their
local ID), `gitsrc` (a commit at its remote: tree, archive sha256, submodules), `pipsets` (every pip install,
resolved with hashes by uv), `resolve` (`imagebuild lock`), `remote` (`imagebuild lock --check-remote`).
"""
