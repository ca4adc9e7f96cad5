"""The page's escaping rules, one per context, for what does not pass through the jinja2 template's autoescape.

- HTML text and attribute values, and the text and attributes of an SVG written by hand: `markup`, the very
  function jinja2's autoescape calls (markupsafe.escape: & < > " ' all escaped), so the template and the hand-made
  SVG follow one rule.
- An element id made from untrusted text (a file name): `element_id`, a token of [A-Za-z0-9_-] only (an id is
  also a word of `aria-labelledby`, where a space would name two elements), unique by a checksum when changed.
- JSON inside a <script> element: `script_json`, with <, > and & as \\u escapes (no `</script>`, no `<!--`
  that would make the end tag not end the element).
- A whole SVG drawing before it is inlined: `checked_svg` refuses one with a script, an event-handler attribute,
  a foreignObject or a link that is not to a fragment of the page; matplotlib escapes its own text, this checks
  that nothing it was given came out as markup.
- Text matplotlib draws: `plain_text` turns off mathtext for it (a `$` in a name is drawn, not parsed).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any
from xml.etree import ElementTree

import markupsafe

MAX_ID_TEXT = 40  # characters of the untrusted part of an element id
_ID_SAFE = re.compile(r"[^A-Za-z0-9_-]")
_SVG_NS = "{http://www.w3.org/2000/svg}"
_REFUSED_ELEMENTS = {"script", "foreignobject", "iframe", "object", "embed", "handler", "listener"}


def markup(text: object) -> str:
    """Text for HTML or SVG, in an element or an attribute value: jinja2's autoescape rule."""
    return str(markupsafe.escape(str(text)))


def element_id(prefix: str, text: str) -> str:
    """`<prefix>-<text>` when text is made of [A-Za-z0-9_-] (at most MAX_ID_TEXT), else its safe characters and
    a checksum of the text, so two different names never share an id."""
    safe = _ID_SAFE.sub("_", text)[:MAX_ID_TEXT]
    if safe == text and safe:
        return f"{prefix}-{safe}"
    return f"{prefix}-{safe}-{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"


def script_json(value: Any) -> str:
    """JSON for a <script type="application/json"> element: the same value to JSON.parse, no markup in it."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


class UnsafeSvg(ValueError):
    """An SVG drawing that would run something or fetch something if inlined."""


def checked_svg(svg: str) -> str:
    """The drawing as given, after checking that it holds no script, no event handler, no foreignObject and no
    link other than to a fragment (#id); UnsafeSvg else."""
    if "<!" in svg.replace("<![CDATA[", ""):  # no DTD, no entity: what is checked is what the browser reads
        raise UnsafeSvg("holds a declaration")
    try:
        root = ElementTree.fromstring(svg)
    except ElementTree.ParseError as exc:
        raise UnsafeSvg(f"not well-formed SVG: {exc}") from None
    for element in root.iter():
        tag = str(element.tag).removeprefix(_SVG_NS).rsplit("}", 1)[-1].lower()
        if tag in _REFUSED_ELEMENTS:
            raise UnsafeSvg(f"holds a <{tag}> element")
        for name, value in element.attrib.items():
            local = name.rsplit("}", 1)[-1].lower()
            if local.startswith("on"):
                raise UnsafeSvg(f"holds an event-handler attribute ({local[:40]})")
            if local == "href" and not value.startswith("#"):
                raise UnsafeSvg("holds a link that is not to a fragment of the page")
            if "url(" in value.replace(" ", "").lower() and not re.fullmatch(r"url\(#[A-Za-z0-9_-]+\)", value):
                raise UnsafeSvg(f"holds a url() that is not to a fragment of the page ({local[:40]})")
    return svg


def plain_text(texts: Any) -> None:
    """Each matplotlib Text drawn as given: no mathtext parsing (usetex is never turned on)."""
    for text in texts:
        text.set_parse_math(False)
        text.set_usetex(False)
