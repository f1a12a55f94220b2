"""The proxy's one error tree (proxy/floor/errors.py): every exception class of the proxy is defined
there, stands on `ipc.errors.Failure`, takes its arguments in one order (the message, then
keywords), and the hierarchy its docstring draws is the one the classes have."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

from swapd import proxy
from swapd.ipc.errors import Failure
from swapd.ipc.messages import Error
from swapd.proxy.floor import errors


def _proxy_modules() -> list[str]:
    return [
        info.name
        for info in pkgutil.walk_packages(proxy.__path__, prefix="swapd.proxy.")
        if not info.name.endswith("__main__")
    ]


def _drawn() -> dict[str, str]:
    """Class name -> its parent's, as the docstring's tree draws them."""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in (errors.__doc__ or "").splitlines():
        found = re.search(r"(?:└──|├──) (\w+)", line)
        root = re.match(r"\s+(Failure) \(ipc\.errors\)", line)
        if root:
            stack = [(-1, "Failure")]
            continue
        if not found or not stack:
            continue
        depth = found.start()
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[found.group(1)] = stack[-1][1]
        stack.append((depth, found.group(1)))
    return parents


def test_every_exception_class_of_the_proxy_is_defined_in_errors() -> None:
    elsewhere = []
    for name in _proxy_modules():
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == name:
                elsewhere.append(f"{name}.{cls.__name__}")
    assert [e for e in elsewhere if not e.startswith("swapd.proxy.floor.errors.")] == []


def test_the_drawn_tree_is_the_classes_tree() -> None:
    classes = {
        cls.__name__: cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, Failure) and cls.__module__ == errors.__name__
    }
    drawn = _drawn()
    assert set(drawn) == set(classes), "every class drawn, and nothing else"
    for name, cls in classes.items():
        assert cls.__bases__[0].__name__ == drawn[name], name
        assert issubclass(cls, Failure)


@pytest.mark.parametrize(
    ("cls", "status", "code"),
    [
        (errors.ProxyError, 500, "internal_error"),
        (errors.BadRequest, 400, "bad_request"),
        (errors.Unauthorized, 401, "unauthorized"),
        (errors.Forbidden, 403, "forbidden"),
        (errors.NotFound, 404, "not_found"),
        (errors.TooManyRequests, 429, "concurrency_limit"),
        (errors.Unavailable, 503, "service_unavailable"),
        (errors.BadGateway, 502, "bad_gateway"),
        (errors.Refused, 502, "bad_gateway"),
        (errors.UpstreamError, 502, "bad_gateway"),
        (errors.UpstreamRefused, 502, "bad_gateway"),
        (errors.HeadTimeout, 502, "bad_gateway"),
        (errors.UpstreamBroken, 502, "bad_gateway"),
        (errors.OutOfStep, 502, "bad_gateway"),
    ],
)
def test_one_argument_order_and_each_class_its_status(
    cls: type[errors.ProxyError], status: int, code: str
) -> None:
    error = cls("what failed")
    assert (error.message, str(error), error.status, error.code) == (
        "what failed",
        "what failed",
        status,
        code,
    )
    other = cls("what failed", status=418, code="teapot", headers={"X-A": "1"}, log_tail=["l"])
    assert (other.status, other.code, other.headers, other.log_tail) == (
        418,
        "teapot",
        {"X-A": "1"},
        ("l",),
    )
    # The code a status gives when none is named, as the response says it.
    assert cls("m", status=409).code == (code if cls.default_code else "conflict")


def test_a_daemon_error_reply_is_raised_again_with_its_fields() -> None:
    reply = Error(id=1, status=504, code="health_check_timeout", message="slow", log_tail=("x",))
    error = errors.ProxyError.from_reply(reply)
    assert (error.status, error.code, error.message, error.log_tail) == (
        504,
        "health_check_timeout",
        "slow",
        ("x",),
    )
    assert error.response().status == 504


def test_a_head_too_large_names_its_limit() -> None:
    assert str(errors.HeadTooLarge(32768)) == "response head larger than 32768 bytes"
    assert isinstance(errors.HeadTooLarge(1), errors.UpstreamError)
