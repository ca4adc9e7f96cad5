"""Issue 21, class 6 (the guard's rules, on the host): every request body, generated, is either refused with a
4xx naming the field or relayed with max_tokens within the limit and the served model; the guard itself against
the real runtime runs in the local-cpu image (tests/e2e/test_runtime_e2e.py, the smoke `runtime` check)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from smoke.serve_guard import FIELDS, Limits, Refused, check, parse

LIMITS = Limits(max_new_tokens=128, max_request_bytes=1 << 20, max_concurrency=4)
SETTINGS = settings(
    max_examples=600, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
keys = st.sampled_from(sorted(FIELDS["/v1/chat/completions"] | FIELDS["/v1/completions"]) + ["generation_config"])
bodies = st.dictionaries(keys, values, max_size=6) | st.fixed_dictionaries(
    {"messages": st.just([{"role": "user", "content": "hi"}])},
    optional={"max_tokens": st.integers(-(10**10), 10**10), "stream": values, "n": values, "temperature": values},
)


@SETTINGS
@given(path=st.sampled_from(sorted(FIELDS)), body=bodies)
def test_a_body_is_refused_with_a_4xx_or_relayed_bounded(path: str, body: dict[str, Any]) -> None:
    try:
        out = check(path, body, LIMITS, "/served")
    except Refused as exc:
        assert 400 <= exc.status < 500 and exc.message and "\n" not in exc.message
        assert len(exc.message) < 400
        return
    assert out["model"] == "/served"
    given_max = out.get("max_tokens", out.get("max_completion_tokens"))
    assert isinstance(given_max, int) and 1 <= given_max <= LIMITS.max_new_tokens
    assert set(out) <= FIELDS[path] and "generation_config" not in out
    if path == "/v1/chat/completions":
        assert isinstance(out["messages"], list) and out["messages"]
    else:
        assert isinstance(out["prompt"], str) and out["prompt"]


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b'{"model": ', "not valid JSON"),
        (b"[1]", "must be a JSON object"),
        (b'{"max_tokens": NaN}', "not valid JSON"),
        (b'{"max_tokens": ' + b"9" * 5000 + b"}", "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_bytes_that_are_not_a_json_object_are_a_400(raw: bytes, words: str) -> None:
    with pytest.raises(Refused) as caught:
        parse(raw)
    assert caught.value.status == 400 and words in caught.value.message


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {"model": "m", "max_tokens": 4}, "messages"),
        ("/v1/chat/completions", {"messages": []}, "messages"),
        ("/v1/chat/completions", {"messages": [{"role": "root", "content": "x"}]}, "messages[0].role"),
        ("/v1/completions", {"model": "m"}, "prompt"),
        ("/v1/completions", {"prompt": "x", "max_tokens": -5}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 1_000_000_000}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": True}, "max_tokens"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 129},
         "max_completion_tokens"),
        ("/v1/completions", {"prompt": "x", "generation_config": json.dumps({"max_new_tokens": 10**9})},
         "generation_config"),
        ("/v1/completions", {"prompt": "x", "n": 2}, "n"),
    ],
)  # fmt: skip
def test_the_issues_requests_are_refused_naming_the_field(path: str, body: dict[str, Any], param: str) -> None:
    with pytest.raises(Refused) as caught:
        check(path, body, LIMITS, None)
    assert caught.value.status == 400 and caught.value.param == param, caught.value.message


def test_a_request_without_max_tokens_gets_the_limit_not_transformers_1024() -> None:
    out = check("/v1/completions", {"model": "/served", "prompt": "hello"}, LIMITS, "/served")
    assert out["max_tokens"] == 128 and out["model"] == "/served"


@pytest.mark.parametrize("given", ["other", "/served/", "", None])
def test_another_model_or_none_is_a_404_model_not_found_as_openai_answers(given: str | None) -> None:
    """Issue 34: the runtime must not be asked for (or load) another model; OpenAI's API answers 404."""
    body = {"prompt": "hello"} if given is None else {"prompt": "hello", "model": given}
    with pytest.raises(Refused) as caught:
        check("/v1/completions", body, LIMITS, "/served")
    error = caught.value.body()["error"]
    assert caught.value.status == 404 and error["code"] == "model_not_found" and error["param"] == "model"
    assert error["type"] == "invalid_request_error" and "/served" in error["message"]
