"""Shared pytest configuration: fixture notebooks are data for the harness tests, not chapters."""

collect_ignore_glob = ["fixtures/*"]
