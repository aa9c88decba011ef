"""The attention explorer (`attnlab serve`): :mod:`attnlab.web.app` assembles it; its docstring maps the files."""
