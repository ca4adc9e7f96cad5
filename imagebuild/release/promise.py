"""What a public tag promises, held to: a tag never moves to an image whose GPU arches or OCI platforms differ
from what the tag stands for (plan/image_key.py ImageKey.promise), so an MI250 user never pulls a gfx942-only
build under the tag that promises gfx90a;gfx942.

The image's key and arches come from its own labels (io.imagebuild.image-key, io.imagebuild.arches,
io.imagebuild.oci-platform), the same for a local image and a staged digest; an image built without a key (not
by imagebuild, or before it had one) is not held to a promise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from imagebuild.errors import PublishFailed
from imagebuild.plan.image_key import ImageKey, Promise


def _arches(labels: Mapping[str, object]) -> tuple[str, ...]:
    text = str(labels.get("io.imagebuild.arches") or "none")
    return () if text == "none" else tuple(a for a in text.split(";") if a)


def check_promises(children: Sequence[Mapping[str, object] | None], tags: Sequence[str], index: bool) -> None:
    """PublishFailed (exit 5) naming both sets when a tag promises other arches or platforms than the image has.

    children: the labels of the one image, or of each platform child of an index (index=True)."""
    labelled = [(labels, key) for labels in children if labels and (key := ImageKey.from_labels(labels))]
    if not labelled:
        return
    platforms = tuple(str(labels.get("io.imagebuild.oci-platform") or key.oci) for labels, key in labelled)
    for tag in tags:
        for labels, key in labelled:
            promised = key.promise(tag, index)
            have = Promise(_arches(labels), platforms)
            if set(promised.arches) != set(have.arches) or set(promised.platforms) != set(have.platforms):
                raise PublishFailed(
                    f"refusing to move tag {tag} to {key.name}: the tag promises {promised.describe()}, "
                    f"the image has {have.describe()}",
                    hint=f"publish it under its own name ({key.name}), or build what the tag promises",
                )
