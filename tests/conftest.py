"""Shared test configuration. Tests run under pytest-asyncio in auto mode (see pyproject.toml)."""
