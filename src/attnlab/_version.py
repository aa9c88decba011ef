"""attnlab's version, in one place: the package, run folders, exports and the web server read it here
(pyproject.toml reads the literal below without importing anything)."""

__version__ = "0.1.0"
