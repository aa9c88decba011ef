"""attnlab: train, evaluate, serve and explain attention-based translation models."""

__version__ = "0.1.0"
