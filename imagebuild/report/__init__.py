"""The compatibility page: which image runs on which GPU, and what was proven there (issue 25).

One row per (target, OCI platform, GPU arch) of the matrix, filled from the evidence that exists: the build report,
the smoke reports (and their history), the arch-coverage documents, the publish reports and signing records, and
optionally what a registry's attestations say. Never-run evidence is shown as "not run", never as a pass.

`model` (the page's data), `evidence` (bounded reading of the files under build/), `rows` (matrix x evidence ->
rows), `lookup` (the GPU lookup: devices, names, and loads_on per row), `history` (smoke numbers over time),
`bench` (kernel benchmark documents, checked entry by entry), `plots` (static SVG with matplotlib), `escape` (the
escaping rule of each context the template's autoescape does not cover: hand-made SVG, ids, inline JSON, mathtext),
`html` (the jinja2 writer).
"""
