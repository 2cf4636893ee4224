"""ncl: noisy-correspondence learning for image-text retrieval."""

__version__ = "0.1.0"
