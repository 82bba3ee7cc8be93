"""Credentials of the object store never show: not in a setting's error, not in a log
line (a library's message or traceback quoting them), not from a failing command."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shoal import config
from shoal.errors import ConfigError
from shoal.storage.location import RedactingFilter, redact

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
KEY_ID = "AKIAIOSFODNN7EXAMPLE"


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)


def test_a_storage_url_with_credentials_is_refused_without_repeating_them() -> None:
    url = f"s3://{KEY_ID}:{SECRET}@bucket/prefix"
    with pytest.raises(ConfigError) as refused:
        config.load(env={"SHOAL_STORAGE_URL": url})
    message = str(refused.value)
    assert "credentials do not belong in the URL" in message
    assert SECRET not in message and KEY_ID not in message
    assert config.load(env={"SHOAL_STORAGE_URL": "s3://bucket/p/"}).storage_url == "s3://bucket/p"


def test_shoal_serve_refuses_such_a_url_and_prints_no_secret(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SHOAL_DATA_DIR": str(tmp_path / "data"),
        "SHOAL_STORAGE_URL": f"s3://{KEY_ID}:{SECRET}@bucket/prefix",
    }
    done = subprocess.run(
        [sys.executable, "-m", "shoal.cli", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "storage_url" in done.stderr
    assert SECRET not in done.stdout + done.stderr
    assert KEY_ID not in done.stdout + done.stderr


def test_log_lines_and_tracebacks_have_the_credentials_blanked(credentials: None) -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("tests.secrets")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        logger.warning("request signed with %s failed", SECRET)
        try:
            raise OSError(f"AWS Error ACCESS_DENIED for key {KEY_ID}/{SECRET}")
        except OSError:
            logger.exception("flush failed")
        logger.info("nothing secret here")
    finally:
        logger.removeHandler(handler)
    text = out.getvalue()
    assert SECRET not in text and KEY_ID not in text
    assert "request signed with *** failed" in text
    assert "ACCESS_DENIED for key ***/***" in text  # the traceback kept, blanked
    assert "nothing secret here" in text
    assert redact(f"x {SECRET} y") == "x *** y"
