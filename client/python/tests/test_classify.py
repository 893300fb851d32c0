# SPDX-License-Identifier: Apache-2.0
"""The HTTP classifier: 5xx, 408, 429 and transport errors are failures;
1xx-3xx and the other 4xx successes (urllib and http.client errors, any
object with .status or .status_code)."""

import http.client
import io
import socket
import urllib.error

import pytest

from cbdclient import FAILURE, SUCCESS, classify_http, http_outcome


class Resp:
    def __init__(self, **kw):
        self.__dict__.update(kw)


@pytest.mark.parametrize("status,outcome", [
    (100, SUCCESS), (200, SUCCESS), (204, SUCCESS), (301, SUCCESS), (400, SUCCESS),
    (401, SUCCESS), (404, SUCCESS), (409, SUCCESS), (422, SUCCESS), (407, SUCCESS),
    (408, FAILURE), (429, FAILURE), (500, FAILURE), (502, FAILURE), (503, FAILURE),
    (599, FAILURE), (0, FAILURE), (-1, FAILURE)])
def test_status_table(status, outcome):
    assert http_outcome(status) == outcome
    assert classify_http(Resp(status=status)) == outcome
    assert classify_http(Resp(status_code=status)) == outcome


def test_urllib_errors():
    err = urllib.error.HTTPError("http://x", 503, "Unavailable", {}, io.BytesIO(b""))
    assert classify_http(err) == FAILURE
    err = urllib.error.HTTPError("http://x", 404, "Not Found", {}, io.BytesIO(b""))
    assert classify_http(err) == SUCCESS
    assert classify_http(urllib.error.URLError("refused")) == FAILURE


def test_transport_errors_are_failures():
    for err in (http.client.RemoteDisconnected("gone"), http.client.IncompleteRead(b""),
                socket.timeout("slow"), TimeoutError(), ConnectionRefusedError(),
                OSError("unreachable")):
        assert classify_http(err) == FAILURE, err


def test_requests_style_error_with_response():
    class HTTPError(Exception):
        def __init__(self, response):
            self.response = response

    assert classify_http(HTTPError(Resp(status_code=404))) == SUCCESS
    assert classify_http(HTTPError(Resp(status_code=500))) == FAILURE


def test_results_without_status_are_successes():
    assert classify_http("body") == SUCCESS
    assert classify_http(Resp(status=True)) == SUCCESS  # a bool is no status
