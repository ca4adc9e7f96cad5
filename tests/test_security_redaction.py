"""Issue 21, class 3: redaction as a property. For generated secrets of many shapes (multi-line files such as a
`.netrc` or a PEM key, values over 4 KiB, env values of several lines, URLs with user and password, with a token
as the user alone, percent-encoded), every line of the value, the whole value, and each credential part of a URL
never survive `Secrets.scrub` of a log line that holds it among other text; nor the argv the build report keeps.
Pieces shorter than MIN_NEEDLE characters are the stated exception (docs/security.md)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagebuild.building.secrets import MAX_SECRET_FILE, MIN_NEEDLE, REDACTED, Secrets, check_secret_flags
from imagebuild.errors import ConfigError

SETTINGS = settings(
    max_examples=400, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
chars = st.characters(
    blacklist_categories=("Cs", "Cc"), blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
)
line = st.text(chars, min_size=MIN_NEEDLE, max_size=80).filter(lambda s: len(s.strip()) >= MIN_NEEDLE)
multi_line = st.lists(line, min_size=1, max_size=12).map("\n".join)
long_value = st.builds(lambda s, n: (s * (n // max(1, len(s)) + 1))[:n], line, st.integers(4097, 20_000))
word = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=MIN_NEEDLE, max_size=30)
url_user_pass = st.builds(
    lambda u, p: f"https://{quote(u, safe='')}:{quote(p, safe='')}@index.example/simple", word, word
)
url_token = st.builds(lambda t: f"https://{quote(t, safe='')}@index.example/simple", word)
netrc = st.builds(lambda h, u, p: f"machine {h}\n  login {u}\n  password {p}\n", word, word, word)
values = st.one_of(multi_line, long_value, url_user_pass, url_token, netrc)
noise = st.text(chars, max_size=20)


def pieces(value: str) -> list[str]:
    """What must never appear: the value, each line, and a URL's user info, password and user, raw and
    percent-decoded (the decoded form is what a tool prints after parsing the URL)."""
    from urllib.parse import unquote, urlsplit

    out = [value.strip(), *(x for x in value.splitlines())]
    if "://" in value and "@" in value:
        parts = urlsplit(value.strip())
        info = parts.netloc.rpartition("@")[0]
        user, _, password = info.partition(":")
        out += [info, user, password, unquote(user), unquote(password)]
    return [p for p in out if len(p.strip()) >= MIN_NEEDLE]


@SETTINGS
@given(value=values, before=noise, after=noise, from_file=st.booleans())
def test_no_piece_of_a_secret_survives_scrubbing(value: str, before: str, after: str, from_file: bool) -> None:
    secrets = Secrets()
    try:
        if from_file:
            with tempfile.NamedTemporaryFile("w", encoding="utf-8", delete=False) as fh:
                fh.write(value)
            secrets.add_file("netrc", Path(fh.name))
            os.unlink(fh.name)
        else:
            secrets.add_value("tok", value)
        for piece in pieces(value):
            logged = secrets.scrub(f"{before}{piece}{after}")
            assert piece not in logged, (piece, logged)
            assert piece.strip() not in logged
        assert REDACTED in secrets.scrub(value.splitlines()[0] if value.splitlines() else value)
    finally:
        secrets.cleanup()


def test_a_multi_line_netrc_from_a_file_is_scrubbed_line_by_line(tmp_path: Path) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine pypi.example\nlogin build-bot\npassword hunter2-but-longer\n")
    secrets = Secrets()
    try:
        secrets.add_file("netrc", netrc)
        for shown in ("password hunter2-but-longer", "login build-bot", "machine pypi.example"):
            assert secrets.scrub(f"#7 0.31 {shown}") == f"#7 0.31 {REDACTED}"
    finally:
        secrets.cleanup()


def test_a_token_of_a_user_only_url_printed_alone_is_scrubbed() -> None:
    secrets = Secrets()
    try:
        secrets.add_value("pipindex", "https://ghp_abcdefghijklmnop@pypi.example/simple")
        assert "ghp_abcdefghijklmnop" not in secrets.scrub("Looking in indexes: ghp_abcdefghijklmnop")
    finally:
        secrets.cleanup()


def test_a_secret_file_too_large_to_redact_and_a_missing_pip_cert_are_refused(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"x" * (MAX_SECRET_FILE + 1))
    with pytest.raises(ConfigError, match="larger than 512 KiB"):
        check_secret_flags({}, [f"id=big,src={big}"])
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        check_secret_flags({}, [f"id=f,src={fifo}"])
    for cert, words in ((str(tmp_path / "absent.pem"), "does not exist"), (str(tmp_path), "is not a regular file")):
        with pytest.raises(ConfigError, match=words) as caught:
            check_secret_flags({"PIP_CERT": cert}, [])
        assert "\n" not in str(caught.value)
