"""Security-suite configuration."""

from __future__ import annotations


def pytest_configure(config):
    config.addinivalue_line("markers", "test_timeout(seconds): per-unit-test limit of the code server for this case")
